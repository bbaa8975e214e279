"""Argument types shared by commands."""
import click

image_arg = click.argument("image", type=click.Path())
json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def open_fs(image):
    import fstool
    return fstool.open_image(image)
