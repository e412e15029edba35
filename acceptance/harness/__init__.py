"""The harness: the pytest plugin, its session and fixtures, pairing, probes, observers, evidence, the lab."""
