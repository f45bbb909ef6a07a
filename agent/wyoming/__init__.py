"""The Wyoming door: the framing of the protocol (framing.py, sans-IO, also
what the speech device speaks to its TTS server), the conversation service
Home Assistant hands transcripts to (service.py) and its settings (config.py)."""
