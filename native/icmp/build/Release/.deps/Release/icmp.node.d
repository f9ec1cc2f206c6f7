cmd_Release/icmp.node := ln -f "Release/obj.target/icmp.node" "Release/icmp.node" 2>/dev/null || (rm -rf "Release/icmp.node" && cp -af "Release/obj.target/icmp.node" "Release/icmp.node")
