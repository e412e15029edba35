"""The product: its records and their rules (store), its HTTP server, and rendering for people."""
