"""Conversations: the history store on disk and the runner of one ask."""
