"""The hermes targets: the reference platform (controller, sandbox, broker, proxy, product) running the real
hermes-agent 0.19.0 (``acceptance/targets/profiles/hermes.toml``) as its agent. ``hermes`` keeps the platform's guards
around hermes's configuration (the managed layer in the image, read-only)."""

from acceptance.targets.hermes.driver import HermesTarget, clean, create, preflight

__all__ = ["HermesTarget", "clean", "create", "preflight"]
