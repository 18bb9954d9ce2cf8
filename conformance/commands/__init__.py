"""One module per ``w8a8`` subcommand. Each defines ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int`` (the exit status). Modules import their heavy dependencies inside ``run``
so that ``w8a8 --help`` stays fast and works with the base install."""
