"""The model path: the proxy that holds the provider key and meters every call."""
