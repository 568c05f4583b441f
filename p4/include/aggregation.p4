#ifndef P4INA_AGGREGATION_P4
#define P4INA_AGGREGATION_P4

// What to do with the packet once the cell has been updated.
const bit<8> SEND_NOTHING = 0;      // contribution absorbed (or a duplicate while siblings are missing)
const bit<8> SEND_RESULT_DOWN = 1;  // root completed: narrow, multicast to the children
const bit<8> SEND_RESULT_BACK = 2;  // retransmission to a final cell: the stored result, to that child only
const bit<8> SEND_UP = 3;           // inner node completed (or re-sends): partial sum to the parent
const bit<8> SEND_RELAY = 4;        // result from the parent: multicast to the children unchanged

// SHARP-style aggregation of one job's contributions in one switch of its tree.
// See docs/DESIGN.md ("Aggregation state machine") for the protocol.
control Aggregation(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

#include "../generated/lane_registers.p4"
    register<bit<32>>(NUM_CELLS) slot_bitmap;    // children that contributed in this round
    register<bit<8>>(NUM_CELLS) slot_contribs;   // how many (a popcount of the bitmap, kept to avoid one)
    register<bit<8>>(NUM_CELLS) slot_state;      // STATE_* phase | STATE_OVERFLOW
    register<bit<8>>(NUM_CELLS) slot_exponent;   // exponent of the round's first contribution
    register<bit<8>>(NUM_CELLS) slot_next_exp;   // minimum next_exponent of the round's contributions (or the result's)
    register<bit<8>>(NUM_CELLS) slot_token;      // job install that last used the cell
    register<bit<8>>(NUM_CELLS) slot_epoch;      // all-reduce generation that last used the cell
    register<bit<32>>(NUM_CELLS) slot_csum;      // the round's accumulated checksum (or a stored result's)

    counter(MAX_JOBS, CounterType.packets_and_bytes) contributions;
    counter(MAX_JOBS, CounterType.packets_and_bytes) retransmissions;
    counter(MAX_JOBS, CounterType.packets_and_bytes) completions;
    counter(MAX_JOBS, CounterType.packets_and_bytes) overflows;
    counter(MAX_JOBS, CounterType.packets_and_bytes) corrupt;   // rounds and results whose checksum failed

    bit<8> send = SEND_NOTHING;
    bit<1> no_lanes = 0;   // an exponent round (ELEM_NONE): the packet carries no lanes
    bit<1> saturated = 0;  // the cell's sums saturated this round (STATE_OVERFLOW)
    bit<1> load_from_cell = 0;
    bit<1> resend = 0;
    bit<1> fresh = 0;

    action unknown_job() {
        meta.drop_reason = DROP_UNKNOWN_JOB;
    }

    action set_job(bit<8> job_index, bit<8> role, bit<8> fan_in, bit<16> slot_base,
                   bit<16> slot_count, bit<16> mcast_grp, bit<9> up_port,
                   bit<8> result_type, bit<8> shift, bit<8> token, bit<8> up_type, bit<8> up_shift,
                   bit<8> in_shift) {
        meta.job_index = job_index;
        meta.role = role;
        meta.fan_in = fan_in;
        meta.slot_base = slot_base;
        meta.slot_count = slot_count;
        meta.mcast_grp = mcast_grp;
        meta.up_port = up_port;
        meta.result_type = result_type;
        meta.shift = shift;
        meta.token = token;
        meta.up_type = up_type;
        meta.up_shift = up_shift;
        meta.in_shift = in_shift;
    }

    // The rounding terms of a right shift by meta.out_shift (0 for no shift): to nearest, ties to even.
    action set_rounding() {
        meta.round_add = 0;
        meta.round_odd = 0;
        if (meta.out_shift != 0) {
            meta.round_add = ((bit<32>)1 << (meta.out_shift - 1)) - 1;
            meta.round_odd = 1;
        }
    }

    // One entry per job on this switch (MAX_JOBS - 1 at most; room to spare for modify-by-reinsert).
    table job_config {
        key = { hdr.agg.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly unknown_job; }
        const default_action = unknown_job();
        size = 64;
    }

    action bad_port() {
        meta.drop_reason = DROP_BAD_PORT;
    }

    action from_child(bit<8> child_index) {
        meta.from_parent = 0;
        meta.child_bit = 32w1 << child_index;
    }

    action from_parent() {
        meta.from_parent = 1;
    }

    // Which ports belong to a job's tree here: its children (with their bitmap bit) and its parent.
    table job_ports {
        key = {
            hdr.agg.job_id: exact @name("job_id");
            standard_metadata.ingress_port: exact @name("ingress_port");
        }
        actions = { from_child; from_parent; @defaultonly bad_port; }
        const default_action = bad_port();
        size = 1024;
    }

    action locate_cell() {
        meta.cell = (((bit<32>)meta.slot_base + (bit<32>)hdr.agg.slot) << 1) | (bit<32>)hdr.agg.shadow;
        meta.other_cell = meta.cell ^ 1;
    }

    action read_cell() {
        slot_bitmap.read(meta.bitmap, meta.cell);
        slot_contribs.read(meta.contribs, meta.cell);
        slot_state.read(meta.state, meta.cell);
    }

    action write_cell() {
        slot_bitmap.write(meta.cell, meta.bitmap);
        slot_contribs.write(meta.cell, meta.contribs);
        slot_state.write(meta.cell, meta.state);
        slot_token.write(meta.cell, meta.token);
        slot_epoch.write(meta.cell, hdr.agg.epoch);
    }

    // The checksum's salt: a packet's lanes belong to this chunk (offset) of this job's all-reduce (epoch).
    action compute_salt() {
        meta.salt = hdr.agg.offset ^ ((bit<32>)hdr.agg.job_id << 16) ^ ((bit<32>)hdr.agg.epoch << 8) ^ CHECKSUM_SALT;
    }

    action sum_lanes32() {
#include "../generated/lanes_sum32.p4"
    }

    action sum_lanes16() {
#include "../generated/lanes_sum16.p4"
    }

    action sum_lanes8() {
#include "../generated/lanes_sum8.p4"
    }

    // A checksum failed: count it, and start the cell's round afresh so that the children's retransmissions
    // rebuild the sum from scratch (the corrupt lanes are overwritten by the round's first contribution).
    action restart_round() {
        corrupt.count((bit<32>)meta.job_index);
        meta.bitmap = 0;
        meta.contribs = 0;
        meta.state = STATE_AGGREGATING;
        write_cell();
        meta.drop_reason = DROP_CORRUPT;
    }

    action widen16() {
        hdr.lanes32.setValid();
#include "../generated/lanes_widen16.p4"
    }

    action widen8() {
        hdr.lanes32.setValid();
#include "../generated/lanes_widen8.p4"
    }

    action accumulate() {
#include "../generated/lanes_accumulate.p4"
    }

    action store_lanes() {
#include "../generated/lanes_store.p4"
    }

    action load_lanes() {
        hdr.lanes32.setValid();
        hdr.lanes16.setInvalid();
        hdr.lanes8.setInvalid();
#include "../generated/lanes_load.p4"
    }

    action narrow16() {
        hdr.lanes16.setValid();
#include "../generated/lanes_narrow16.p4"
        hdr.lanes32.setInvalid();
    }

    action narrow8() {
        hdr.lanes8.setValid();
#include "../generated/lanes_narrow8.p4"
        hdr.lanes32.setInvalid();
    }

    apply {
        if (hdr.agg.op != OP_CONTRIB && hdr.agg.op != OP_RESULT) {
            meta.drop_reason = DROP_MALFORMED;
            return;
        }
        // Trailing bytes after the lanes would ride along into a result: refuse them.
        if (hdr.agg.elem_type == ELEM_NONE) {
            no_lanes = 1;
        }
        if ((hdr.lanes32.isValid() && hdr.ipv4.total_len != AGG_IPV4_LEN_INT32)
                || (hdr.lanes16.isValid() && hdr.ipv4.total_len != AGG_IPV4_LEN_INT16)
                || (hdr.lanes8.isValid() && hdr.ipv4.total_len != AGG_IPV4_LEN_INT8)
                || (no_lanes == 1 && hdr.ipv4.total_len != AGG_IPV4_LEN_NONE)) {
            meta.drop_reason = DROP_MALFORMED;
            return;
        }
        job_config.apply();
        if (meta.drop_reason != DROP_NONE) {
            return;
        }
        if ((bit<16>)hdr.agg.slot >= meta.slot_count) {
            meta.drop_reason = DROP_BAD_SLOT;
            return;
        }
        job_ports.apply();
        if (meta.drop_reason != DROP_NONE) {
            return;
        }
        // Contributions only come up from children, results only down from the parent.
        if ((meta.from_parent == 1 && hdr.agg.op != OP_RESULT)
                || (meta.from_parent == 0 && hdr.agg.op != OP_CONTRIB)) {
            meta.drop_reason = DROP_BAD_PORT;
            return;
        }
        // Every child of this switch sits at the same level of the tree, so its packets carry the same
        // cumulative shift (the controller's in_shift): a sum of differently scaled partials is garbage.
        if (meta.from_parent == 0 && hdr.agg.shift != meta.in_shift) {
            meta.drop_reason = DROP_SCALE_MISMATCH;
            return;
        }
        // An int8 contribution answered with int32 lanes (a result, or an inner node's partial sum) would
        // grow by 768 bytes; BMv2 leaves 512 in front of a packet and aborts beyond. The controller never
        // installs such a job (wireformat.fixedpoint.check_growth); a packet that claims one is dropped.
        if (hdr.lanes8.isValid() && meta.from_parent == 0
                && (meta.result_type == ELEM_INT32 || (meta.role == ROLE_INNER && meta.up_type == ELEM_INT32))) {
            meta.drop_reason = DROP_GROWTH;
            return;
        }
        locate_cell();
        compute_salt();

        if (meta.from_parent == 1) {
            // A result must add up (its lanes plus one salt) before it is stored and passed on; a bad one is
            // dropped, and the children's retransmissions fetch it again.
            meta.lane_sum = 0;
            if (hdr.lanes32.isValid()) {
                sum_lanes32();
            } else if (hdr.lanes16.isValid()) {
                sum_lanes16();
            } else if (hdr.lanes8.isValid()) {
                sum_lanes8();
            }
            if (meta.lane_sum + meta.salt != hdr.agg.checksum) {
                corrupt.count((bit<32>)meta.job_index);
                meta.drop_reason = DROP_CORRUPT;
                return;
            }
            slot_csum.write(meta.cell, hdr.agg.checksum);
            // Keep the result for retransmissions, pass it down as it came.
            slot_state.read(meta.state, meta.cell);
            if (hdr.lanes16.isValid()) {
                widen16();
                store_lanes();
                hdr.lanes32.setInvalid();
            } else if (hdr.lanes8.isValid()) {
                widen8();
                store_lanes();
                hdr.lanes32.setInvalid();
            } else if (hdr.lanes32.isValid()) {
                store_lanes();
            }
            meta.state = STATE_FINAL;
            if ((hdr.agg.flags & FLAG_OVERFLOW) != 0) {
                meta.state = STATE_FINAL | STATE_OVERFLOW;
            }
            if (no_lanes == 1) {
                meta.state = meta.state | STATE_NO_LANES;
            }
            slot_state.write(meta.cell, meta.state);
            slot_next_exp.write(meta.cell, (bit<8>)hdr.agg.next_exponent);
            slot_token.write(meta.cell, meta.token);
            slot_epoch.write(meta.cell, hdr.agg.epoch);
            send = SEND_RELAY;
        } else {
            bit<8> cell_token;
            bit<8> cell_epoch;
            slot_token.read(cell_token, meta.cell);
            slot_epoch.read(cell_epoch, meta.cell);
            read_cell();
            if (cell_token != meta.token) {
                fresh = 1;   // an earlier install of a job used this cell
            } else if (hdr.agg.epoch != cell_epoch) {
                bit<8> age = hdr.agg.epoch - cell_epoch;
                if (age < 128) {
                    fresh = 1;   // a newer all-reduce: start the round afresh
                } else {
                    meta.drop_reason = DROP_STALE;
                    return;
                }
            }
            if (meta.bitmap == 0) {
                fresh = 1;   // every child has moved on to the other copy: a new round
            }
            if (fresh == 1) {
                meta.bitmap = 0;
                meta.contribs = 0;
                meta.state = STATE_AGGREGATING;
            }

            // The child only reuses this slot after it saw the other copy's result.
            bit<8> other_token;
            bit<8> other_epoch;
            slot_token.read(other_token, meta.other_cell);
            slot_epoch.read(other_epoch, meta.other_cell);
            if (other_token == meta.token && other_epoch == hdr.agg.epoch) {
                bit<32> other_bitmap;
                slot_bitmap.read(other_bitmap, meta.other_cell);
                slot_bitmap.write(meta.other_cell, other_bitmap & ~meta.child_bit);
            }

            bit<8> cell_no_lanes = meta.state & STATE_NO_LANES;
            if ((meta.bitmap & meta.child_bit) != 0) {
                retransmissions.count((bit<32>)meta.job_index);
                bit<8> phase = meta.state & STATE_PHASE_MASK;
                if (phase == STATE_FINAL) {
                    send = SEND_RESULT_BACK;
                    load_from_cell = 1;
                } else if (phase == STATE_SENT_UP) {
                    send = SEND_UP;
                    load_from_cell = 1;
                    resend = 1;
                }
                slot_next_exp.read(meta.next_exp, meta.cell);
            } else {
                bit<8> cell_exponent;
                slot_exponent.read(cell_exponent, meta.cell);
                slot_next_exp.read(meta.next_exp, meta.cell);
                if (meta.bitmap == 0) {
                    meta.keep = 0;
                    slot_exponent.write(meta.cell, (bit<8>)hdr.agg.exponent);
                    meta.next_exp = (bit<8>)hdr.agg.next_exponent;
                    if (no_lanes == 1) {
                        meta.state = meta.state | STATE_NO_LANES;
                    }
                } else if (cell_exponent != (bit<8>)hdr.agg.exponent
                        || (no_lanes == 1 && cell_no_lanes == 0)
                        || (no_lanes == 0 && cell_no_lanes != 0)) {
                    meta.drop_reason = DROP_SCALE_MISMATCH;
                    return;
                } else {
                    meta.keep = 0xffffffff;
                    // The agreed exponent of the slot's next round: the smallest any worker can use.
                    if (hdr.agg.next_exponent < (int<8>)meta.next_exp) {
                        meta.next_exp = (bit<8>)hdr.agg.next_exponent;
                    }
                }
                slot_next_exp.write(meta.cell, meta.next_exp);
                if (hdr.lanes16.isValid()) {
                    widen16();
                    hdr.lanes16.setInvalid();
                } else if (hdr.lanes8.isValid()) {
                    widen8();
                    hdr.lanes8.setInvalid();
                }
                meta.overflow = 0;
                if ((hdr.agg.flags & FLAG_OVERFLOW) != 0) {
                    meta.overflow = 1;   // a child's partial sum already saturated
                }
                if (hdr.lanes32.isValid()) {
                    accumulate();
                }
                slot_csum.read(meta.cell_csum, meta.cell);
                if (meta.bitmap == 0) {
                    meta.cell_csum = hdr.agg.checksum;   // the round's first contribution
                } else {
                    meta.cell_csum = meta.cell_csum + hdr.agg.checksum;
                }
                slot_csum.write(meta.cell, meta.cell_csum);
                contributions.count((bit<32>)meta.job_index);
                if (meta.overflow == 1) {
                    overflows.count((bit<32>)meta.job_index);
                    meta.state = meta.state | STATE_OVERFLOW;
                }
                meta.bitmap = meta.bitmap | meta.child_bit;
                meta.contribs = meta.contribs + 1;
                if (meta.contribs == meta.fan_in) {
                    // The sum's lanes must add up to the contributions' checksums: fan_in salts and every lane.
                    // Always: a saturated sum cannot happen with the hosts' scaling, so one that fails the
                    // check is corruption too (a flipped high bit saturates the next addition).
                    meta.lane_sum = 0;
                    if (hdr.lanes32.isValid()) {
                        sum_lanes32();
                    }
                    if (meta.lane_sum + (bit<32>)meta.fan_in * meta.salt != meta.cell_csum) {
                        restart_round();
                        return;
                    }
                    completions.count((bit<32>)meta.job_index);
                    if (meta.role == ROLE_ROOT) {
                        meta.state = (meta.state & STATE_OVERFLOW) | STATE_FINAL;
                        send = SEND_RESULT_DOWN;
                    } else {
                        meta.state = (meta.state & STATE_OVERFLOW) | STATE_SENT_UP;
                        send = SEND_UP;
                    }
                }
                write_cell();
            }
        }

        // Build the outgoing packet.
        if ((meta.state & STATE_OVERFLOW) != 0) {
            saturated = 1;
        }
        meta.overflow = 0;   // from here on: lanes clamped by narrowing
        if (load_from_cell == 1 && no_lanes == 0) {
            load_lanes();
        }
        if (load_from_cell == 1) {
            // A stored sum (or result) is checked before it is sent again: an accumulator holds fan_in salts,
            // a result an inner node keeps for its children one. A flipped bit restarts the round.
            slot_csum.read(meta.cell_csum, meta.cell);
            meta.lane_sum = 0;
            if (hdr.lanes32.isValid()) {
                sum_lanes32();
            }
            bit<32> copies = (bit<32>)meta.fan_in;
            if (meta.role == ROLE_INNER && (meta.state & STATE_PHASE_MASK) == STATE_FINAL) {
                copies = 1;
            }
            if (meta.lane_sum + copies * meta.salt != meta.cell_csum) {
                restart_round();
                return;
            }
        }
        if (meta.from_parent == 0) {
            hdr.agg.next_exponent = (int<8>)meta.next_exp;
        }
        if (send == SEND_RESULT_DOWN || send == SEND_RESULT_BACK) {
            // Only the root holds sums to narrow (its children's partials are in_shift down already, so the
            // root shifts the rest of the job's shift); inner nodes hold results already narrowed.
            meta.out_shift = 0;
            if (meta.role == ROLE_ROOT) {
                meta.out_shift = meta.shift - meta.in_shift;
            }
            set_rounding();
            // lanes32 is valid on every path here; the test makes that visible to p4c's validity analysis.
            if (hdr.lanes32.isValid()) {
                if (meta.result_type == ELEM_INT16) {
                    narrow16();
                } else if (meta.result_type == ELEM_INT8) {
                    narrow8();
                }
            }
            if (meta.overflow == 1) {
                overflows.count((bit<32>)meta.job_index);
            }
            hdr.agg.op = OP_RESULT;
            hdr.agg.shift = meta.shift;
        }
        if (send == SEND_UP) {
            hdr.agg.op = OP_CONTRIB;
            // Partial sums go up as narrow as the lanes that came in: each level of the tree shifts off
            // (rounding) the bits its own additions gained, so every link carries narrow lanes, and no
            // packet grows past the 512 bytes BMv2 leaves in front of it (simple_switch aborts then).
            meta.out_shift = meta.up_shift;
            set_rounding();
            hdr.agg.shift = meta.in_shift + meta.up_shift;
            if (hdr.lanes32.isValid()) {
                if (meta.up_type == ELEM_INT16) {
                    narrow16();
                } else if (meta.up_type == ELEM_INT8) {
                    narrow8();
                }
            }
        }
        if (send == SEND_RESULT_DOWN || send == SEND_RESULT_BACK || send == SEND_UP) {
            // Seal what leaves: lanes changed (narrowed, shifted, summed), the checksum follows them.
            meta.lane_sum = 0;
            if (hdr.lanes32.isValid()) {
                sum_lanes32();
            } else if (hdr.lanes16.isValid()) {
                sum_lanes16();
            } else if (hdr.lanes8.isValid()) {
                sum_lanes8();
            }
            hdr.agg.checksum = meta.lane_sum + meta.salt;
        }
        hdr.agg.flags = 0;
        if (meta.overflow == 1 || saturated == 1) {
            hdr.agg.flags = FLAG_OVERFLOW;
        }
        if (resend == 1) {
            hdr.agg.flags = hdr.agg.flags | FLAG_RETRANSMIT;
        }

        if (hdr.lanes32.isValid()) {
            hdr.agg.elem_type = ELEM_INT32;
            hdr.ipv4.total_len = AGG_IPV4_LEN_INT32;
            hdr.udp.length = AGG_UDP_LEN_INT32;
        } else if (hdr.lanes16.isValid()) {
            hdr.agg.elem_type = ELEM_INT16;
            hdr.ipv4.total_len = AGG_IPV4_LEN_INT16;
            hdr.udp.length = AGG_UDP_LEN_INT16;
        } else if (hdr.lanes8.isValid()) {
            hdr.agg.elem_type = ELEM_INT8;
            hdr.ipv4.total_len = AGG_IPV4_LEN_INT8;
            hdr.udp.length = AGG_UDP_LEN_INT8;
        } else {
            hdr.agg.elem_type = ELEM_NONE;
            hdr.ipv4.total_len = AGG_IPV4_LEN_NONE;
            hdr.udp.length = AGG_UDP_LEN_NONE;
        }
        hdr.udp.checksum = 0;   // lanes changed; 0 means "no checksum" for UDP over IPv4

        if (send == SEND_RESULT_DOWN || send == SEND_RELAY) {
            standard_metadata.mcast_grp = meta.mcast_grp;
        } else if (send == SEND_RESULT_BACK) {
            standard_metadata.egress_spec = standard_metadata.ingress_port;
        } else if (send == SEND_UP) {
            standard_metadata.egress_spec = meta.up_port;
        } else {
            mark_to_drop(standard_metadata);
        }
    }
}

#endif
