"""XLA HLO text: parsing, kernel splitting and static cost analysis."""
