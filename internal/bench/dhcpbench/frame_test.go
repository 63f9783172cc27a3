package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

var testMAC = net.HardwareAddr{0x02, 0x62, 0x6e, 0x00, 0x01, 0x02}

// replyFrame is what a server's reply looks like on the wire: the client
// frame with the ports turned round.
func replyFrame(payload []byte) []byte {
	b := clientFrame(testMAC, payload)
	binary.BigEndian.PutUint16(b[ethLen+ipv4Len:], serverPort)
	binary.BigEndian.PutUint16(b[ethLen+ipv4Len+2:], clientPort)
	return b
}

func TestClientFrame(t *testing.T) {
	for _, payload := range [][]byte{bytes.Repeat([]byte{0xa5}, 300), []byte("odd")} {
		b := clientFrame(testMAC, payload)
		if len(b) != headLen+len(payload) {
			t.Fatalf("frame of %d bytes, want %d", len(b), headLen+len(payload))
		}
		if !bytes.Equal(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) || !bytes.Equal(b[6:12], testMAC) {
			t.Errorf("Ethernet addresses % x, want broadcast from %s", b[0:12], testMAC)
		}
		ip := b[ethLen : ethLen+ipv4Len]
		// A header with its checksum in sums to all ones (RFC 1071).
		if got := sum16(0, ip); got != 0xffff {
			t.Errorf("IPv4 header sums to %#x, want 0xffff", got)
		}
		if got := binary.BigEndian.Uint16(ip[2:4]); int(got) != len(b)-ethLen {
			t.Errorf("IPv4 total length %d, want %d", got, len(b)-ethLen)
		}
		udp := b[ethLen+ipv4Len:]
		var acc uint32
		acc += uint32(sum16(0, ip[12:16])) + uint32(sum16(0, ip[16:20])) + protoUDP + uint32(len(udp))
		if got := sum16(acc+uint32(sum16(0, udp)), nil); got != 0xffff {
			t.Errorf("UDP segment with pseudo-header sums to %#x, want 0xffff", got)
		}
		if p, ok := serverPayload(b); ok {
			t.Errorf("serverPayload took a frame to port 67: %q", p)
		}
		if p, ok := serverPayload(replyFrame(payload)); !ok || !bytes.Equal(p, payload) {
			t.Errorf("serverPayload of a reply = %q, %v; want the payload", p, ok)
		}
	}
}

func TestServerPayloadRejects(t *testing.T) {
	good := replyFrame([]byte("payload"))
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:headLen-1] }},
		{"not IPv4", func(b []byte) []byte { b[12] = 0x86; b[13] = 0xdd; return b }},
		{"IP version 6", func(b []byte) []byte { b[ethLen] = 0x65; return b }},
		{"IHL below 5", func(b []byte) []byte { b[ethLen] = 0x44; return b }},
		{"TCP", func(b []byte) []byte { b[ethLen+9] = 6; return b }},
		{"more fragments", func(b []byte) []byte { b[ethLen+6] = 0x20; return b }},
		{"fragment offset", func(b []byte) []byte { b[ethLen+7] = 1; return b }},
		{"total length past the frame", func(b []byte) []byte { b[ethLen+2] = 0xff; return b }},
		{"total length below the headers", func(b []byte) []byte { b[ethLen+2], b[ethLen+3] = 0, 27; return b }},
		{"UDP length past the datagram", func(b []byte) []byte { b[ethLen+ipv4Len+4] = 0xff; return b }},
		{"UDP length below its header", func(b []byte) []byte { b[ethLen+ipv4Len+4], b[ethLen+ipv4Len+5] = 0, 7; return b }},
	} {
		b := tc.edit(bytes.Clone(good))
		if p, ok := serverPayload(b); ok {
			t.Errorf("%s: serverPayload = %q, true; want false", tc.name, p)
		}
	}
	// Ethernet padding after the datagram is not payload.
	if p, ok := serverPayload(append(bytes.Clone(good), 0, 0, 0)); !ok || string(p) != "payload" {
		t.Errorf("padded frame: serverPayload = %q, %v; want the payload alone", p, ok)
	}
}

// FuzzServerPayload feeds frames off the wire to the parser: it must never
// panic, and what it returns must lie inside the frame.
func FuzzServerPayload(f *testing.F) {
	f.Add(replyFrame([]byte("payload")))
	f.Add(clientFrame(testMAC, bytes.Repeat([]byte{1}, 300)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := serverPayload(b)
		if !ok {
			return
		}
		if len(p) > len(b)-headLen {
			t.Fatalf("payload of %d bytes from a frame of %d", len(p), len(b))
		}
	})
}
