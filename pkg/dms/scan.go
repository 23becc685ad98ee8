package dms

import (
	"bufio"
	"bytes"
	"io"
)

// Scanner splits a byte stream into DMS messages, for tools that read captured DMS output
// (dms2iceberg decode, golden tests). It accepts both MessageFormat renderings and any mix of
// them: json-unformatted (one document per line) and json (DMS's cJSON pretty printing, where a
// document starts with "{" in the first column and ends with a "}" in the first column).
//
// Splitting follows the braces of each line outside of strings: a message ends when its braces
// balance. A line that starts with "{" in the first column while the previous message is still
// open ends that message (it was truncated) and starts a new one, so one broken message never
// swallows the next. A line that does not start with "{" and is not inside a message is a
// message of its own (it will not decode). Blank lines between messages are skipped. Every
// malformed piece is returned as a message, so that the decoder reports it.
type Scanner struct {
	r     *bufio.Reader
	acc   []byte
	depth int
	line  int // lines read so far
	start int // first line of the message being accumulated
	msg   []byte
	first int
	err   error
	eof   bool
	next  []byte // a line read ahead that starts the next message
}

// NewScanner returns a Scanner reading from r.
func NewScanner(r io.Reader) *Scanner {
	return &Scanner{r: bufio.NewReaderSize(r, 64<<10)}
}

// Scan advances to the next message; it returns false at the end of the input or on a read
// error (see Err).
func (s *Scanner) Scan() bool {
	s.msg = nil
	for {
		var line []byte
		if s.next != nil {
			line, s.next = s.next, nil
		} else {
			if s.eof {
				return s.flush()
			}
			l, err := s.r.ReadBytes('\n')
			if err != nil {
				if err != io.EOF {
					s.err = err
					return false
				}
				s.eof = true
				if len(l) == 0 {
					return s.flush()
				}
			}
			s.line++
			line = l
		}
		if len(s.acc) == 0 {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			s.start = s.line
			s.depth = 0
		} else if line[0] == '{' {
			// A new document starts while the previous one is open: that one was truncated.
			s.next = line
			s.emit()
			return true
		}
		s.acc = append(s.acc, line...)
		trimmed := bytes.TrimLeft(line, " \t\r\n")
		if len(s.acc) == len(line) && len(trimmed) > 0 && trimmed[0] != '{' && trimmed[0] != '[' {
			s.emit() // not JSON object text: a message of its own
			return true
		}
		s.depth += braceDelta(line)
		if s.depth <= 0 {
			s.emit()
			return true
		}
	}
}

func (s *Scanner) flush() bool {
	if len(s.acc) == 0 {
		return false
	}
	s.emit()
	return true
}

func (s *Scanner) emit() {
	s.msg = s.acc
	s.first = s.start
	s.acc = nil
	s.depth = 0
}

// Message returns the current message. The bytes are owned by the caller.
func (s *Scanner) Message() []byte { return s.msg }

// Line returns the 1-based line number where the current message starts.
func (s *Scanner) Line() int { return s.first }

// Err returns the first read error (never io.EOF).
func (s *Scanner) Err() error { return s.err }

// braceDelta returns the change in nesting depth ({ and [ open, } and ] close) over one line,
// ignoring brackets inside strings. String state does not carry over lines: JSON strings cannot
// hold a raw newline.
func braceDelta(line []byte) int {
	d := 0
	in, esc := false, false
	for _, c := range line {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			d++
		case c == '}' || c == ']':
			d--
		}
	}
	return d
}
