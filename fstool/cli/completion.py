"""``fstool completion SHELL``: the script that completes fstool's commands,
options and arguments in bash, zsh or fish (click's shell completion)."""
import click
from click.shell_completion import get_completion_class
from .main import cli

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def cmd(shell):
    """Print the completion script for SHELL (bash, zsh or fish).

    \b
    bash:  eval "$(fstool completion bash)"    (in ~/.bashrc)
    zsh:   eval "$(fstool completion zsh)"     (in ~/.zshrc)
    fish:  fstool completion fish > ~/.config/fish/completions/fstool.fish
    """

    comp = get_completion_class(shell)(cli, {}, "fstool", "_FSTOOL_COMPLETE")
    click.echo(comp.source())
