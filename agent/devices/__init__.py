"""Device handlers: where the decoded answer goes after the daemon: serial
ports, programs, subscribers; and the sentence segmenter they share."""
