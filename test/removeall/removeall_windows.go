package removeall

import "golang.org/x/sys/windows"

// STATUS_NOT_IMPLEMENTED, as Go reports it.
const errNotImplemented = windows.ERROR_INVALID_FUNCTION
