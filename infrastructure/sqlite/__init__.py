"""The embedded deployment's SQLite backend (``ENGINE = "infrastructure.sqlite"``): see ``base``."""
