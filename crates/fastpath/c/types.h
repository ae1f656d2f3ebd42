/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixed-width integer types and compiler helpers shared by every fast-path
 * header. Hosted builds (the Rust FFI, the user-space data plane, the
 * simulator) take them from <linux/types.h>; a BPF build (`clang -target bpf`)
 * has no <asm/types.h>, so unless the includer already pulled in the kernel's
 * types (vmlinux.h or <linux/types.h>) we define them here exactly as
 * asm-generic/int-ll64.h does, so that a later kernel include is a compatible
 * redefinition.
 */
#ifndef WAVERUNNER_FP_TYPES_H
#define WAVERUNNER_FP_TYPES_H

#if defined(__bpf__)
#if !defined(__VMLINUX_H__) && !defined(_ASM_GENERIC_INT_LL64_H) && \
	!defined(_UAPI_ASM_GENERIC_INT_LL64_H)
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
#endif
#else
#include <linux/types.h>
#endif

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#define FP_OFFSETOF(type, member) __builtin_offsetof(type, member)

#endif /* WAVERUNNER_FP_TYPES_H */
