"""What runs inside a sandbox, fed to its python: the standard library only (a test enforces it)."""
