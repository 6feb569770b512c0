"""How Hearth touches the disk: JSON stores, the SQLite rule, disk errors, bounded reads, crash logs."""
