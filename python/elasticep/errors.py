"""Exceptions: one class per eep_status_t class (include/eep/status.h), the status kept.

    EEPError                       every error; .status (int), .name ("EEP_ERR_PEER_TIMEOUT")
      InvalidArgument (ValueError) -1 .. -19, and the binding's own checks before any launch
      ResourceError                -20 .. -39
      PeerLost                     -40 .. -59  (survivors shrink and go on)
      GroupLost                    -60 .. -79  (rebuild from a new membership view)
      DeviceError                  -80 .. -99  (NoDevice: EEP_ERR_NO_DEVICE, also "no GPU here")
      ControlPlaneError            -100 .. -119
      InternalError                -120
    LibraryNotFound (EEPError)     libeep.so could not be loaded
"""


class EEPError(RuntimeError):
    def __init__(self, message, status=None, name=None):
        super().__init__(message)
        self.status = status
        self.name = name


class InvalidArgument(EEPError, ValueError):
    pass


class ResourceError(EEPError):
    pass


class PeerLost(EEPError):
    pass


class GroupLost(EEPError):
    pass


class DeviceError(EEPError):
    pass


class NoDevice(DeviceError):
    pass


class ControlPlaneError(EEPError):
    pass


class InternalError(EEPError):
    pass


class LibraryNotFound(EEPError):
    pass


def from_status(status, name, message):
    """The exception for eep_status_t @status (an instance, not raised)."""
    if status == -80:
        cls = NoDevice
    elif -19 <= status <= -1:
        cls = InvalidArgument
    elif -39 <= status <= -20:
        cls = ResourceError
    elif -59 <= status <= -40:
        cls = PeerLost
    elif -79 <= status <= -60:
        cls = GroupLost
    elif -99 <= status <= -80:
        cls = DeviceError
    elif -119 <= status <= -100:
        cls = ControlPlaneError
    else:
        cls = InternalError
    return cls(message, status, name)
