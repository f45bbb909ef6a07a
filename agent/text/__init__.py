"""Text shaping, sans-IO, shared by the devices and the doors: the sentence
segmenter (segmenter.py) and the cleaner of text for a voice (speech.py)."""
