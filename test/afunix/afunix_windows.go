package afunix

import "golang.org/x/sys/windows"

const errNoFamily = windows.WSAEAFNOSUPPORT
