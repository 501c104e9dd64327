"""The `attend` command's room: its parser (cli_parser.py), what each command does (cli.py runs
them: index_commands.py, serve_commands.py, cli_stats.py), and their plumbing (the database a
command opens, its progress, signals, logs, the server record and `attend search`'s client).
Entered from service/launch.py; it calls down into the API, the engine, the cluster and the
indexer, and nothing below imports it. Imports nothing itself: `python3 -m
service.commands.port_check` runs before the install, with the standard library only.
"""
