"""Device handlers: where the decoded answer goes after the daemon: serial
ports, programs, subscribers; and the sentence segmenter they share."""


def device_types() -> dict[str, type]:
    """The handler classes by their `type` in the config."""
    # Imported here: the config loader needs the classes, and they need
    # pyserial and trio only once a device is configured.
    from agent.devices.command import CommandDevice
    from agent.devices.homeassistant import HomeAssistantDevice
    from agent.devices.serial import SerialDevice
    from agent.devices.wyoming_tts import WyomingSpeech

    return {cls.kind: cls for cls in (SerialDevice, CommandDevice, WyomingSpeech,
                                        HomeAssistantDevice)}
