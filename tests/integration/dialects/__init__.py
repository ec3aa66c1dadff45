"""Every provider dialect end to end: the official SDKs through the gateway to a fake of the host that
checks what it receives."""
