"""`python -m tether.parent.cli`: the `tether` command."""

from tether.parent.cli.main import command

command()
