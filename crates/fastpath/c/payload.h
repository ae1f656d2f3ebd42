/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The payloads that travel inside fast-path packets (docs/interfaces.md §1):
 *
 * - an entry envelope, the payload of a CLIENT_REQUEST and the data of the log
 *   entry it becomes:
 *     tag u8 (FP_ENV_TAG) | origin u64 | req u64 | client u64 | seq u64 |
 *     now_ms u64 | command length u32 | command
 *   origin and req: the replica that took the request from its client and its
 *   request id (0 and 0 from a client); now_ms: the leader's clock when it
 *   ordered the request, stamped by the leader's data plane (or software);
 * - a client reply, the payload of a CLIENT_REPLY:
 *     status u8 (FP_STATUS_*) | leader u64 | body
 *
 * All integers little-endian. The Rust mirror is `waverunner_fastpath::payload`
 * (checked against these values, with byte vectors); the XDP program stamps
 * now_ms at FP_ENV_OFF_NOW_MS.
 */
#ifndef WAVERUNNER_FP_PAYLOAD_H
#define WAVERUNNER_FP_PAYLOAD_H

/* First byte of an entry envelope (entry data of other kinds starts otherwise). */
#define FP_ENV_TAG 1
/* First byte of a member record entry (the node's address book). */
#define FP_ENTRY_MEMBER_RECORD 2

#define FP_ENV_OFF_ORIGIN 1
#define FP_ENV_OFF_REQ 9
#define FP_ENV_OFF_CLIENT 17
#define FP_ENV_OFF_SEQ 25
#define FP_ENV_OFF_NOW_MS 33
#define FP_ENV_OFF_LEN 41
#define FP_ENV_PREFIX 45 /* bytes before the command */

#define FP_REPLY_OFF_STATUS 0
#define FP_REPLY_OFF_LEADER 1
#define FP_REPLY_PREFIX 9 /* bytes before the body */

/* Client reply status. */
#define FP_STATUS_OK 0      /* applied; the body is the result */
#define FP_STATUS_ERROR 1   /* refused as invalid, never applied; the body says why */
#define FP_STATUS_RETRY 2   /* not applied now (no leader, busy, stale): retry is safe */
#define FP_STATUS_UNKNOWN 3 /* timed out inside the cluster: applied or not */

#endif
