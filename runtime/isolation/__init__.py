"""Isolation: what keeps one instance's processes, files and network apart from every other's."""
