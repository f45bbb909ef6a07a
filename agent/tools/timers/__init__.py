"""Timers and reminders: the schedule (sans-IO), its file, and the tool
provider whose trio task rings them through the center."""
