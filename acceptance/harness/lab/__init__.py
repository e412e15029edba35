"""The lab: the only network a probe, a sink or a broken control ever touches (DESIGN §8).

``Lab`` starts a sink process in a network namespace of its own, made by this run and linked to nothing
but what a broken control deliberately connects to it (a veth into one sandbox). The sink answers for
"the internet", "a public resolver", "the cloud metadata service" and stand-ins of the platform's
services, all addresses that exist only inside the lab; it records every DNS query, TCP SYN and UDP
datagram it sees, and writes a pcap. There is no uplink, so no route leads out of the machine, whatever a
sandbox or a mutant does. The namespace is held by the sink process alone and vanishes with it.
"""

from acceptance.harness.lab.lab import ADDRESSES, ADDRESSES6, Lab

__all__ = ["ADDRESSES", "ADDRESSES6", "Lab"]
