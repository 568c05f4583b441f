/*
 * p4ina: SHARP-style in-network aggregation for BMv2 (v1model).
 *
 * Hosts send gradient chunks as fixed-point integers; each switch of a job's
 * aggregation tree sums its children's contributions in registers, passes the
 * partial sum up, and the root multicasts the result back down, optionally
 * narrowed to int16/int8. Everything else is routed as plain IPv4.
 *
 * This file only includes and wires; see docs/DESIGN.md for the protocol.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/types.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/checksums.p4"
#include "include/aggregation.p4"
#include "include/forwarding.p4"
#include "include/ingress.p4"
#include "include/egress.p4"

V1Switch(
    P4inaParser(),
    P4inaVerifyChecksum(),
    P4inaIngress(),
    P4inaEgress(),
    P4inaComputeChecksum(),
    P4inaDeparser()
) main;
