package main

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestClientFrame6(t *testing.T) {
	for _, payload := range [][]byte{bytes.Repeat([]byte{0x5a}, 120), []byte("odd")} {
		b := clientFrame6(testMAC, payload)
		if len(b) != head6Len+len(payload) {
			t.Fatalf("frame of %d bytes, want %d", len(b), head6Len+len(payload))
		}
		if !bytes.Equal(b[0:6], []byte{0x33, 0x33, 0, 1, 0, 2}) || !bytes.Equal(b[6:12], testMAC) {
			t.Errorf("Ethernet addresses % x, want 33:33:00:01:00:02 from %s", b[0:12], testMAC)
		}
		ip := b[ethLen : ethLen+ipv6Len]
		if got := linkLocal(testMAC).String(); got != "fe80::62:6eff:fe00:102" {
			t.Errorf("link-local %s, want the EUI-64 fe80::62:6eff:fe00:102", got)
		}
		udp := b[ethLen+ipv6Len:]
		var acc uint32
		acc += uint32(sum16(0, ip[8:24])) + uint32(sum16(0, ip[24:40])) + protoUDP + uint32(len(udp))
		if got := sum16(acc+uint32(sum16(0, udp)), nil); got != 0xffff {
			t.Errorf("UDP segment with pseudo-header sums to %#x, want 0xffff", got)
		}
		if _, ok := serverPayload6(b); ok {
			t.Error("serverPayload6 took a frame to port 547")
		}
		reply := bytes.Clone(b)
		binary.BigEndian.PutUint16(reply[ethLen+ipv6Len:], server6)
		binary.BigEndian.PutUint16(reply[ethLen+ipv6Len+2:], client6)
		if p, ok := serverPayload6(reply); !ok || !bytes.Equal(p, payload) {
			t.Errorf("serverPayload6 of a reply = %q, %v; want the payload", p, ok)
		}
		for _, bad := range [][]byte{reply[:head6Len-1], append(bytes.Clone(reply[:12]), append([]byte{8, 0}, reply[14:]...)...)} {
			if _, ok := serverPayload6(bad); ok {
				t.Errorf("serverPayload6 took %x", bad[:16])
			}
		}
	}
}
