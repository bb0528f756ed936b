package bench

// Configs lists every configuration of one comparison run, the baseline
// first.
func Configs(redisAddr string) []Config {
	return []Config{
		None(),
		CbgrpcMemory(),
		CbgrpcRedisCached(redisAddr),
		BareEvalsha(redisAddr),
		CbgrpcRedisStrict(redisAddr),
		CbgrpcRedisStrictDefaultClient(redisAddr),
		Gobreaker(redisAddr),
		Failsafe(),
	}
}
