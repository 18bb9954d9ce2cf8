"""The ``w8a8`` command line (:mod:`w8a8cli.main`): one thin module per subcommand, on top of every package."""
