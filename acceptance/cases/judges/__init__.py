"""Host-side judges the case modules share: detectors, holders, the network probes' runners, sharing."""
