// target.c: stands in for libnvidia-ml.so.1 in the stub register test
// (stubcheck.c). Its functions reuse NVML names with made-up signatures that
// use every kind of argument register, and return 0 only when every argument
// arrived intact.
//
//	gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o DIR/libnvidia-ml.so.1 target.c

#include <stdarg.h>

// Six integer registers, eight vector registers, and two stack arguments.
int nvmlDeviceGetCount_v2(long a1, long a2, long a3, long a4, long a5, long a6,
		double d0, double d1, double d2, double d3, double d4, double d5, double d6, double d7,
		long s1, double s2) {
	long ints[] = {a1, a2, a3, a4, a5, a6};
	double dbls[] = {d0, d1, d2, d3, d4, d5, d6, d7};
	for (int i = 0; i < 6; i++) {
		if (ints[i] != 0x1111111111111111L * (i + 1)) {
			return 100 + i;
		}
	}
	for (int i = 0; i < 8; i++) {
		if (dbls[i] != 0.5 + i) {
			return 200 + i;
		}
	}
	if (s1 != -7) {
		return 300;
	}
	if (s2 != 8.25) {
		return 301;
	}
	return 0;
}

// Variadic: the caller passes the number of vector registers used in %al;
// a stub that clobbered %rax would lose the doubles.
int nvmlDeviceGetUUID(int n, ...) {
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		double d = va_arg(ap, double);
		if (d != 1.25 * (i + 1)) {
			va_end(ap);
			return 400 + i;
		}
	}
	va_end(ap);
	return 0;
}

// For concurrent first calls: echoes its argument.
int nvmlDeviceGetCount(long tag) { return (int)tag; }
