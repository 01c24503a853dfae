package sockerr

import "golang.org/x/sys/windows"

const addrInUse = windows.WSAEADDRINUSE
