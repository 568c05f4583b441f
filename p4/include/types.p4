#ifndef P4INA_TYPES_P4
#define P4INA_TYPES_P4

// Sizes. Python mirrors these in controller/names.py; a test compares them.

// Jobs per switch. Job index 0 is reserved for "no job", so the drop counter can
// also count packets that belong to no job (parse errors, unknown job ids).
#define MAX_JOBS 16
// Aggregation slots per switch, shared out to jobs by the controller. 512 slots
// x 2 shadow copies x 256 lanes x 4 B = 1 MiB of lane registers, within the
// SRAM of one Tofino-class pipe (12 stages x 80 blocks x 16 KiB = 15 MiB) as a
// real switch would give its aggregation job; four jobs of the default 128-slot
// window fit at once. (A Tofino could not update 256 lanes in one pass; SwitchML
// recirculates. The emulation models the memory, not the ALU count.)
#define NUM_SLOTS 512
// Each slot has two shadow copies (SwitchML): cell = (slot_base + slot) * 2 + shadow.
#define NUM_CELLS 1024
// Stride of the drop counter: index = job_index * NUM_DROP_REASONS + reason.
#define NUM_DROP_REASONS 16

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8> IP_PROTO_UDP = 17;
const bit<9> DROP_PORT = 511;

// A switch's role in a job's aggregation tree.
const bit<8> ROLE_ROOT = 1;
const bit<8> ROLE_INNER = 2;

// Phase of a cell (low two bits of slot_state) ...
const bit<8> STATE_AGGREGATING = 0;  // collecting contributions from children
const bit<8> STATE_SENT_UP = 1;      // inner node: partial sum sent to the parent, waiting for the result
const bit<8> STATE_FINAL = 2;        // result known: answer retransmissions with it
const bit<8> STATE_PHASE_MASK = 3;
// ... and sticky flags of the round: some sum of this cell saturated; the round
// carries no lanes (an exponent round, ELEM_NONE), so contributions with lanes
// cannot be mixed into it, nor the other way round.
const bit<8> STATE_OVERFLOW = 0x10;
const bit<8> STATE_NO_LANES = 0x20;

// Drop reasons (index into the drop counter, together with the job index).
const bit<8> DROP_NONE = 0;
const bit<8> DROP_MALFORMED = 1;       // parser error, bad op, length not matching the elem type
const bit<8> DROP_UNKNOWN_JOB = 2;     // no job_config entry for the job id
const bit<8> DROP_BAD_PORT = 3;        // port not in the job's tree here, or op against the tree's direction
const bit<8> DROP_BAD_SLOT = 4;        // slot outside the job's slot range
const bit<8> DROP_SCALE_MISMATCH = 5;  // exponent (or lanes vs none) differs from the cell's first contribution
const bit<8> DROP_BAD_CHECKSUM = 6;    // IPv4 header checksum
const bit<8> DROP_NO_ROUTE = 7;        // no IPv4 route
const bit<8> DROP_TTL_EXPIRED = 8;     // IPv4 TTL would reach 0
const bit<8> DROP_NOT_IPV4 = 9;        // hosts use static ARP; nothing but IPv4 is forwarded
const bit<8> DROP_STALE = 10;          // epoch older than the cell's: a late packet of an earlier all-reduce
const bit<8> DROP_GROWTH = 11;         // int8 lanes where the job answers in int32: the packet would grow past BMv2's headroom
const bit<8> DROP_CORRUPT = 12;        // a checksum failed: a sum (or result) whose lanes do not add up; the round restarts

struct metadata_t {
    // Set for every packet.
    bit<8> drop_reason;
    bit<8> job_index;
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    // ECMP.
    bit<16> ecmp_group;
    bit<16> ecmp_index;
    // From job_config.
    bit<8> role;
    bit<8> fan_in;
    bit<16> slot_base;
    bit<16> slot_count;
    bit<16> mcast_grp;
    bit<9> up_port;
    bit<8> result_type;
    bit<8> shift;
    bit<8> token;
    bit<8> up_type;     // lane type of the partial sums an inner node sends up
    bit<8> up_shift;    // right shift (rounding) of those partial sums, so they stay that narrow
    bit<8> in_shift;    // the shift packets from this switch's children already carry (0 from hosts)
    // From job_ports.
    bit<1> from_parent;
    bit<32> child_bit;
    // Cell state.
    bit<32> cell;
    bit<32> other_cell;
    bit<32> bitmap;
    bit<8> contribs;
    bit<8> state;
    bit<32> keep;       // 0 to overwrite a cell's lanes (new round), all ones to add to them
    bit<8> out_shift;   // right shift applied when narrowing the lanes of an outgoing packet
    bit<32> round_add;  // 2^(out_shift - 1) - 1, and round_odd 1 (0 for no shift): the shift rounds to nearest,
    bit<32> round_odd;  // ties to even (unbiased: a tree rounds its partial sums at every level)
    // End-to-end check (the agg header's checksum): sums are linear, so a cell's accumulated checksum
    // equals its lanes' sum plus fan_in x salt; one packet's checksum is its lanes' sum plus salt.
    bit<32> salt;
    bit<32> lane_sum;
    bit<32> cell_csum;
    bit<8> next_exp;    // the round's agreed next_exponent so far (minimum over its contributions)
    bit<1> overflow;
    // Scratch of the generated per-lane code (metadata rather than action locals,
    // which p4c would copy-propagate into one huge expression per lane).
    bit<32> scratch_a;
    bit<32> scratch_b;
}

#endif
