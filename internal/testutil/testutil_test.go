package testutil

import "testing"

// FreePort never hands out a port twice, though each call's listener is
// closed before it returns and the system may offer the same port again.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	if !handedOut.take(-1) || handedOut.take(-1) {
		t.Error("take: a port recorded once is taken, the second time not")
	}
}
