"""CLI subcommands; each module adds itself with register(subparsers)."""
