/*
 * bcryptprimitives.dll for Wine 8 (Debian 12), whose own lacks ProcessPrng:
 * Go 1.24 and later take every random byte from ProcessPrng
 * (crypto/rand and the runtime's seed), and a Go program without it stops
 * at start. Wine 9.1 and later export it themselves.
 *
 * ProcessPrng fills data with len bytes from RtlGenRandom (advapi32's
 * SystemFunction036), the system's generator, as Windows' ProcessPrng does
 * from the same source. It always returns TRUE, as Windows' does: Go
 * treats anything else as fatal.
 *
 * Built by hack/windows-test.sh with mingw-w64:
 *   x86_64-w64-mingw32-gcc -shared -nostdlib -O2 -o bcryptprimitives.dll \
 *       bcryptprimitives.c bcryptprimitives.def -ladvapi32 -lkernel32
 */
#include <windows.h>

/* RtlGenRandom's export name: ntsecapi.h's declaration needs more headers. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	/* RtlGenRandom takes a ULONG: fill larger requests in pieces. */
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}

BOOL WINAPI DllMainCRTStartup(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
	(void)instance;
	(void)reason;
	(void)reserved;
	return TRUE;
}
