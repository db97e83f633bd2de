/* The floor: the least a module command can do that answers what a check
 * of redis-ratelimit answers, for `make bench` and `make bench-profile` to
 * measure the module's commands against (docs/benchmarks.md). Not part of
 * the product; never loaded outside the benchmarks.
 *
 * FLOOR.CHECK key ttl_ms [n ...]: opens the key for writing, reads its
 * 32-byte value of this module's own data type (a new one on a missing key),
 * writes it back changed, sets the key's expiry to ttl_ms from now, replies
 * five integers, and replicates the command verbatim. Each word after the
 * key is parsed as an integer, as a check parses its parameters: ttl_ms, and
 * then any further words n, whose values are not used otherwise. Those are
 * there so that the floor can be measured with as many words as a check
 * (`FLOOR.CHECK key 60000 100` beside `RL.TOKENBUCKET key 100 0.01`, four
 * words each): Redis's own work for each argument outside the command
 * (reading it from the query, making its string object, freeing it) is then
 * the same on both sides. The three-word form, the contract's floor, runs
 * the code it ran before the extra words existed, but for one jump (they
 * are parsed in a function of their own, reached only when argc is not 3).
 * A word that is not an integer is an ERR, nothing changed (the extra words
 * are read before ttl_ms); a key of another type is the usual WRONGTYPE
 * error. Built by benches/floor/build.sh against the
 * redismodule.h of the redis-module crate the project already depends on. */
#include <stdint.h>
#include <string.h>

#include "redismodule.h"

/* Four 8-byte words, the size of a token bucket's state. */
typedef struct {
    int64_t count;
    int64_t updated_ms;
    int64_t limit;
    int64_t spare;
} Floor;

static RedisModuleType *FloorType;

static int floor_check(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* FLOOR.CHECK with other than three words: the arity, then each word after
 * ttl_ms parsed as an integer, as a check parses its parameters; then the
 * three-word command on the same arguments, which parses ttl_ms and does the
 * work (each word is parsed once). A function of its own, not inlined: the
 * three-word form compares argc and runs the code it ran before the extra
 * words existed. */
static __attribute__((noinline)) int floor_check_words(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 3) return RedisModule_WrongArity(ctx);
    for (int i = 3; i < argc; i++) {
        long long n;
        if (RedisModule_StringToLongLong(argv[i], &n) != REDISMODULE_OK)
            return RedisModule_ReplyWithError(ctx, "ERR each word after ttl_ms must be an integer");
    }
    return floor_check(ctx, argv, 3);
}

static int floor_check(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return floor_check_words(ctx, argv, argc);
    long long ttl_ms;
    if (RedisModule_StringToLongLong(argv[2], &ttl_ms) != REDISMODULE_OK || ttl_ms < 1)
        return RedisModule_ReplyWithError(ctx, "ERR ttl_ms must be a whole number from 1");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    int type = RedisModule_KeyType(key);
    Floor *value;
    if (type == REDISMODULE_KEYTYPE_EMPTY) {
        value = RedisModule_Calloc(1, sizeof(Floor));
        value->limit = 100;
        RedisModule_ModuleTypeSetValue(key, FloorType, value);
    } else if (RedisModule_ModuleTypeGetType(key) != FloorType) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    } else {
        value = RedisModule_ModuleTypeGetValue(key);
    }
    mstime_t now = RedisModule_Milliseconds();
    value->count = value->updated_ms + 1000 < now ? 1 : value->count + 1;
    value->updated_ms = now;
    RedisModule_SetExpire(key, ttl_ms);
    RedisModule_CloseKey(key);
    RedisModule_ReplyWithArray(ctx, 5);
    RedisModule_ReplyWithLongLong(ctx, value->count <= value->limit);
    RedisModule_ReplyWithLongLong(ctx, value->limit);
    RedisModule_ReplyWithLongLong(ctx, value->limit - value->count);
    RedisModule_ReplyWithLongLong(ctx, 0);
    RedisModule_ReplyWithLongLong(ctx, ttl_ms);
    RedisModule_ReplicateVerbatim(ctx);
    return REDISMODULE_OK;
}

static void *floor_rdb_load(RedisModuleIO *rdb, int encver) {
    size_t len;
    char *buf = RedisModule_LoadStringBuffer(rdb, &len);
    if (encver != 0 || buf == NULL || len != sizeof(Floor)) {
        if (buf) RedisModule_Free(buf);
        return NULL;
    }
    Floor *value = RedisModule_Alloc(sizeof(Floor));
    memcpy(value, buf, sizeof(Floor));
    RedisModule_Free(buf);
    return value;
}

static void floor_rdb_save(RedisModuleIO *rdb, void *value) {
    RedisModule_SaveStringBuffer(rdb, value, sizeof(Floor));
}

static void floor_free(void *value) { RedisModule_Free(value); }

static size_t floor_mem_usage(const void *value) {
    (void)value;
    return sizeof(Floor);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = floor_rdb_load,
        .rdb_save = floor_rdb_save,
        .free = floor_free,
        .mem_usage = floor_mem_usage,
    };
    FloorType = RedisModule_CreateDataType(ctx, "rl_floor_", 0, &methods);
    if (FloorType == NULL) return REDISMODULE_ERR;
    return RedisModule_CreateCommand(ctx, "floor.check", floor_check, "write deny-oom fast", 1, 1, 1);
}
