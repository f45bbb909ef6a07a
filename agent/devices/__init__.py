"""Device handlers: where the decoded answer goes after the center: serial
ports, programs, speech; the hub that supervises them and gives them every
reply (hub.py), and the interface they implement (base.py)."""


def device_types() -> dict[str, type]:
    """The handler classes by their `type` in the config."""
    # Imported here: the config loader needs the classes, and they need
    # pyserial and trio only once a device is configured.
    from agent.devices.command import CommandDevice
    from agent.devices.serial import SerialDevice
    from agent.devices.wyoming_tts import WyomingSpeech

    return {cls.kind: cls for cls in (SerialDevice, CommandDevice, WyomingSpeech)}
