#ifndef P4INA_FORWARDING_P4
#define P4INA_FORWARDING_P4

// Plain IPv4 routing for everything that is not aggregation (the ring baseline's
// traffic among it): longest-prefix match, ECMP across a fat-tree's equal uplinks.
// MAC addresses are left alone: hosts use static ARP with each other's real MACs.
control Ipv4Forwarding(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {

    action no_route() {
        meta.drop_reason = DROP_NO_ROUTE;
    }

    action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    // Pick one of `size` members by a flow hash, so a flow keeps its path (no reordering).
    action ecmp(bit<16> group, bit<16> size) {
        meta.ecmp_group = group;
        hash(meta.ecmp_index, HashAlgorithm.crc32, 16w0,
             { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol,
               meta.l4_src_port, meta.l4_dst_port },
             size);
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dst_addr: lpm @name("dst_addr"); }
        actions = { forward; ecmp; @defaultonly no_route; }
        const default_action = no_route();
        size = 1024;
    }

    table ecmp_members {
        key = {
            meta.ecmp_group: exact @name("group");
            meta.ecmp_index: exact @name("index");
        }
        actions = { forward; @defaultonly no_route; }
        const default_action = no_route();
        size = 4096;
    }

    apply {
        if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = DROP_TTL_EXPIRED;
        } else {
            switch (ipv4_lpm.apply().action_run) {
                ecmp: {
                    ecmp_members.apply();
                }
            }
        }
    }
}

#endif
