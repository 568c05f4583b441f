// Interpreter test: v1model hash() with BMv2's algorithms, base and max (modulo).
#include <core.p4>
#include <v1model.p4>

header h_h {
    bit<32> x;
    bit<16> y;
    bit<8>  z;
    bit<4>  n1;
    bit<4>  n2;
    bit<32> crc32_out;
    bit<16> crc16_out;
    bit<16> csum16_out;
    bit<16> xor16_out;
    bit<32> identity_out;
    bit<16> mod_out;
    bit<16> crc16c_out;
    bit<32> crc32c_out;
}

struct headers_t { h_h h; }

struct metadata_t { }

parser HParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.h);
        transition accept;
    }
}

control HVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control HIngress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hash(hdr.h.crc32_out, HashAlgorithm.crc32, 32w0, { hdr.h.x, hdr.h.y, hdr.h.z }, 33w0x100000000);
        hash(hdr.h.crc16_out, HashAlgorithm.crc16, 16w0, { hdr.h.x, hdr.h.y, hdr.h.z }, 17w0x10000);
        hash(hdr.h.csum16_out, HashAlgorithm.csum16, 16w0, { hdr.h.x, hdr.h.y, hdr.h.z }, 17w0x10000);
        hash(hdr.h.xor16_out, HashAlgorithm.xor16, 16w0, { hdr.h.x, hdr.h.y, hdr.h.z }, 17w0x10000);
        hash(hdr.h.identity_out, HashAlgorithm.identity, 32w0, { hdr.h.n1, hdr.h.n2, hdr.h.y }, 33w0x100000000);
        hash(hdr.h.mod_out, HashAlgorithm.crc32, 16w5, { hdr.h.x }, 16w7);
        hash(hdr.h.crc16c_out, HashAlgorithm.crc16_custom, 16w0, { hdr.h.z }, 17w0x10000);
        hash(hdr.h.crc32c_out, HashAlgorithm.crc32_custom, 32w0, { hdr.h.z, hdr.h.y }, 33w0x100000000);
        standard_metadata.egress_spec = 9w4;
    }
}

control HEgress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) { apply { } }

control HCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control HDeparser(packet_out packet, in headers_t hdr) {
    apply { packet.emit(hdr.h); }
}

V1Switch(HParser(), HVerify(), HIngress(), HEgress(), HCompute(), HDeparser()) main;
