"""Argument types shared by commands."""
import click

image_arg = click.argument("image", type=click.Path())
json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def open_fs(image):
    import fstool
    return fstool.open_image(image)


def emit_json(obj, as_json: bool) -> None:
    """Print ``obj`` as one line of JSON when ``as_json`` (else nothing)."""
    if as_json:
        import json
        click.echo(json.dumps(obj, ensure_ascii=False))
