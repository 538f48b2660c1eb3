"""The `tether` command line: one module per subcommand, and the options they share."""
