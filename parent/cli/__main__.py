"""`python -m tether.parent.cli`: the `tether` command, entered as the console script enters it
(`tether._command`: the collector off for the imports, the zygote launched before them)."""

from tether._command import main

main()
