"""Block access to images: the device, a bounded buffer cache and verifiers."""
