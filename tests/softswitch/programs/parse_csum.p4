// Interpreter test: parser errors (simple_switch sets parser_error and still runs ingress;
// a failed extract leaves the header invalid), a custom error raised by verify(), select
// with masks and lookahead, and IPv4 checksum verification (checksum_error) and update.
#include <core.p4>
#include <v1model.p4>

error { BadIpVersion }

header report_h {
    bit<32> parser_error;
    bit<8>  checksum_error;
    bit<8>  valid_bits;     // 1 ethernet, 2 ipv4, 4 udp, 8 tail
    bit<8>  peek;
}

header ethernet_h {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
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

header tail_h {
    bit<8> marker;
}

struct headers_t {
    report_h   report;
    ethernet_h ethernet;
    ipv4_h     ipv4;
    udp_h      udp;
    tail_h     tail;
}

struct metadata_t {
    bit<8> peek;
}

parser PParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            16w0x0800: parse_ipv4;
            16w0x8800 &&& 16w0xFF00: parse_tail;   // 0x88xx: a one-byte tail
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4w4, error.BadIpVersion);
        transition select(hdr.ipv4.protocol) {
            8w17: parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.peek = packet.lookahead<bit<8>>();
        transition select(packet.lookahead<bit<8>>()) {
            8w0x7E: parse_tail;
            default: accept;
        }
    }
    state parse_tail {
        packet.extract(hdr.tail);
        transition accept;
    }
}

control PVerify(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control PIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.report.setValid();
        // errors cannot be cast to bits: report them as 0 none, 1 PacketTooShort, 2 BadIpVersion, 255 other
        if (standard_metadata.parser_error == error.NoError) {
            hdr.report.parser_error = 0;
        } else if (standard_metadata.parser_error == error.PacketTooShort) {
            hdr.report.parser_error = 1;
        } else if (standard_metadata.parser_error == error.BadIpVersion) {
            hdr.report.parser_error = 2;
        } else {
            hdr.report.parser_error = 255;
        }
        hdr.report.checksum_error = (bit<8>)standard_metadata.checksum_error;
        hdr.report.peek = meta.peek;
        bit<8> v = 0;
        if (hdr.ethernet.isValid()) { v = v | 8w1; }
        if (hdr.ipv4.isValid()) { v = v | 8w2; hdr.ipv4.ttl = hdr.ipv4.ttl - 8w1; }
        if (hdr.udp.isValid()) { v = v | 8w4; }
        if (hdr.tail.isValid()) { v = v | 8w8; }
        hdr.report.valid_bits = v;
        standard_metadata.egress_spec = 9w3;
    }
}

control PEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control PCompute(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control PDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.report);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tail);
    }
}

V1Switch(PParser(), PVerify(), PIngress(), PEgress(), PCompute(), PDeparser()) main;
