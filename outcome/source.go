package outcome

// Source says where an operation's final answer came from (idem.Result.Source).
type Source string

const (
	SourceResponse  Source = "response" // the server's answer to an attempt of this call
	SourceReplay    Source = "replay"   // the server replayed a stored answer (Idempotent-Replayed)
	SourceKeyStatus Source = "status"   // the status endpoint reported the stored answer
	SourceStore     Source = "store"    // the keystore already held the final answer
	SourceLookup    Source = "lookup"   // idem.Config.Lookup found the payment after the key could tell no more

)
