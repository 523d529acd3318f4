"""tpuperf: a learned performance model for XLA programs, as Unix tools."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1
