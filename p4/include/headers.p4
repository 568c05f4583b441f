#ifndef P4INA_HEADERS_P4
#define P4INA_HEADERS_P4

#include "../generated/agg_header.p4"

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4> version;
    bit<4> ihl;
    bit<8> diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    agg_h agg;
    // At most one lane header is valid: the width named by agg.elem_type.
    lanes32_h lanes32;
    lanes16_h lanes16;
    lanes8_h lanes8;
}

#endif
