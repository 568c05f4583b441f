#ifndef P4INA_EGRESS_P4
#define P4INA_EGRESS_P4

// Results leave addressed to the host on the port, from the aggregation address
// (not from whichever worker's contribution completed the cell: a host drops
// packets that claim its own address as source), so a plain UDP socket receives them.
control P4inaEgress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    counter(MAX_JOBS, CounterType.packets_and_bytes) results_sent;

    action set_host(bit<48> mac, bit<32> ip) {
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.dst_addr = ip;
        hdr.ethernet.src_addr = AGG_MAC;
        hdr.ipv4.src_addr = AGG_IP;
    }

    // One entry per host-facing port.
    table host_port {
        key = { standard_metadata.egress_port: exact @name("egress_port"); }
        actions = { set_host; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    apply {
        if (hdr.agg.isValid() && hdr.agg.op == OP_RESULT) {
            host_port.apply();
            results_sent.count((bit<32>)meta.job_index);
        }
    }
}

#endif
