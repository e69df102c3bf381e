package pacer

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultMessagePrefix is the refusal message's text when none is given.
const DefaultMessagePrefix = "pacer is limiting how fast new upstream connections open to reduce the chance of an upstream rate limit"

// Refusal is the refusal on the wire (SPEC §9): status 200, an event-stream
// content type, a Retry-After header, and one SSE error event as the body.
type Refusal struct {
	Status int
	Header http.Header
	Body   []byte
}

// RefusalResponse builds the refusal for a hint of retryAfterSeconds with
// messagePrefix (the proxy's text; "" for DefaultMessagePrefix). The body
// comes from pacer_refusal_body, which JSON-escapes the prefix.
func RefusalResponse(retryAfterSeconds uint64, messagePrefix string) (*Refusal, error) {
	if messagePrefix == "" {
		messagePrefix = DefaultMessagePrefix
	}
	if !utf8.ValidString(messagePrefix) {
		return nil, inputError("messagePrefix", messagePrefix, "must be valid UTF-8")
	}
	if strings.IndexByte(messagePrefix, 0) >= 0 {
		return nil, inputError("messagePrefix", messagePrefix, "must not contain a NUL byte")
	}
	body, err := refusalBody(messagePrefix, retryAfterSeconds)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, 2)
	h.Set("Content-Type", RefusalContentType())
	h.Set("Retry-After", strconv.FormatUint(retryAfterSeconds, 10))
	return &Refusal{Status: RefusalStatus, Header: h, Body: body}, nil
}

// Write sends the refusal on w: headers, status, body.
func (r *Refusal) Write(w http.ResponseWriter) error {
	for name, values := range r.Header {
		w.Header()[name] = append([]string(nil), values...)
	}
	w.WriteHeader(r.Status)
	_, err := w.Write(r.Body)
	return err
}
