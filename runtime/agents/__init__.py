"""Agents: the reference agent, how any agent is launched, its managed configuration and user settings."""
