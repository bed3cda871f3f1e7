// Jaeger v2 as a tool of a module of our own: `go install jaeger@v1.76.0` is refused because
// Jaeger's go.mod has a replace directive, which a module that depends on it must repeat.
// tools/build-peers.sh runs `go get -tool` here and builds the binary into the peer cache.
module github.com/attest-otel/attest-otel/tools/peers/jaeger

go 1.25

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
