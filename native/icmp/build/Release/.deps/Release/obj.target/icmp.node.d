cmd_Release/obj.target/icmp.node := g++ -o Release/obj.target/icmp.node -shared -pthread -rdynamic -m64  -Wl,-soname=icmp.node -Wl,--start-group Release/obj.target/icmp/icmp.o -Wl,--end-group 
