// The C# client's tests: the shared protocol vectors, a gateway that sends a malformed frame, one
// that reports inputs a crashed node may not have run, and live `ferry node` processes playing the chat sample: a room drained off its node mid-play with
// nothing lost, doubled or reordered; a refused token; a gateway shut down, one killed and one
// frozen with the client on it, which connects to the next gateway, binds again, reports exactly
// the inputs it could not deliver, and plays on.
//
// Run by tools/client-cs/test.sh; the `ferry` binary is FERRY_BIN, or the workspace's debug build.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Threading;
using System.Threading.Tasks;

namespace Ferry.Client.Tests
{
    /// <summary>Assertions that say what was expected.</summary>
    static class Check
    {
        public static void True(bool condition, string what)
        {
            if (!condition) throw new Exception("expected " + what);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                throw new Exception(what + ": expected " + expected + ", got " + actual);
        }
    }

    /// <summary>A chat line as a push brought it: the push's number and the line's text.</summary>
    struct Line
    {
        public long Seq;
        public string Text;

        public override string ToString()
        {
            return Seq + ":" + Text;
        }
    }

    static class Program
    {
        static readonly string Root = Path.GetFullPath(Path.Combine(AppDomain.CurrentDomain.BaseDirectory, "../../.."));
        static readonly string Ferry = Environment.GetEnvironmentVariable("FERRY_BIN") ?? Path.Combine(Root, "target/debug/ferry");
        static Cluster cluster;

        static int Main()
        {
            JsonValue vectors = Vectors.Load(Path.Combine(Root, "docs/client-protocol-vectors.json"));
            var tests = new List<KeyValuePair<string, Action>>
            {
                Test("the close codes are the vectors'", () => Vectors.CloseCodesMatch(vectors)),
                Test("close statuses end a session as the vectors say", () => Vectors.CloseStatusesMatch(vectors)),
                Test("each call writes the frame of the vectors", () => Vectors.ClientFramesMatch(vectors)),
                Test("gateway frames read as the vectors say, and malformed ones are refused", () => Vectors.ServerFramesMatch(vectors)),
                Test("a malformed frame from a gateway ends the session with a reason, not an exception in the game loop", MalformedEndsTheSession),
                Test("every malformed frame of the vectors ends a live session as malformed", () => EveryMalformedVector(vectors)),
                Test("an undelivered frame reports the inputs no delivered covered, once, the rebind after it is reported, and the session stays open", UndeliveredAfterACrash),
                Test("a client binds, plays, and keeps its session and every line while its room is drained off its node", DrainMidPlay),
                Test("a refused token ends the connect with its close code", RefusedToken),
                Test("a client whose gateway shuts down is told so, connects to the next one, binds again and plays on", GatewayShutDown),
                Test("a client whose gateway is killed connects to the next one, binds again and plays on", GatewayKilled),
                Test("a client whose gateway goes silent gives up on it after the idle timeout, reports the inputs it sent there, and plays on", GatewayFrozen),
            };
            int passed = 0, failed = 0;
            try
            {
                foreach (var test in tests)
                {
                    var watch = Stopwatch.StartNew();
                    try
                    {
                        test.Value();
                        passed++;
                        Console.WriteLine("ok   " + test.Key + " (" + watch.ElapsedMilliseconds + " ms)");
                    }
                    catch (Exception e)
                    {
                        failed++;
                        Console.WriteLine("FAIL " + test.Key + " (" + watch.ElapsedMilliseconds + " ms)\n     " + e);
                    }
                }
            }
            finally
            {
                if (cluster != null) cluster.Dispose();
            }
            Console.WriteLine(passed + " passed, " + failed + " failed");
            return failed == 0 ? 0 : 1;
        }

        static KeyValuePair<string, Action> Test(string name, Action body)
        {
            return new KeyValuePair<string, Action>(name, body);
        }

        /// <summary>The cluster the live tests share: started by the first of them.</summary>
        static Cluster Live()
        {
            if (cluster == null) cluster = Cluster.Start(Ferry, "n1", "n2", "n3", "n4", "n5");
            return cluster;
        }

        static FerryClient Connect(params string[] urls)
        {
            return FerryClient.Connect(new ClientOptions
            {
                Urls = urls,
                Token = Cluster.Token,
                MinBackoffMs = 20,
                MaxBackoffMs = 200,
                Attempts = 20,
            });
        }

        /// <summary>The next event, as a game loop polling each frame would see it; at most <paramref name="timeoutMs"/> away.</summary>
        static FerryEvent Next(FerryClient client, int timeoutMs = 30000)
        {
            var watch = Stopwatch.StartNew();
            FerryEvent next;
            while (!client.Poll(out next))
            {
                if (watch.ElapsedMilliseconds > timeoutMs) throw new Exception("no event within " + timeoutMs + " ms");
                Thread.Sleep(1);
            }
            return next;
        }

        static FerryEvent Expect(FerryClient client, FerryEventType type, int timeoutMs = 30000)
        {
            FerryEvent next = Next(client, timeoutMs);
            Check.Equal(type, next.Type, "the next event (" + next + ")");
            return next;
        }

        /// <summary>The next push of <paramref name="actor"/>, as a chat line with its push number; any other event fails.</summary>
        static Line NextLine(FerryClient client, string actor)
        {
            FerryEvent push = Expect(client, FerryEventType.Push);
            Check.Equal(actor, push.Actor, "the pushing Actor");
            JsonValue line = Json.Parse(push.Message);
            Check.Equal(actor, line.Member("from").String, "the line's speaker");
            return new Line { Seq = push.Seq, Text = line.Member("text").String };
        }

        /// <summary>Says lines from..to, a window of them under way, and returns their pushes; <paramref name="progress"/> hears each.</summary>
        static List<Line> Say(FerryClient client, string actor, int from, int to, Action<int> progress = null)
        {
            const int window = 16;
            var lines = new List<Line>();
            int sent = from;
            while (lines.Count < to - from)
            {
                while (sent < to && sent < from + lines.Count + window)
                {
                    Check.True(client.Send(actor, "{\"Say\":\"line-" + sent + "\"}"), "the input to " + actor + " was taken");
                    sent++;
                }
                lines.Add(NextLine(client, actor));
                if (progress != null) progress(from + lines.Count);
            }
            return lines;
        }

        /// <summary>Checks the lines one by one: each once, in order, its push number the next one from <paramref name="seq0"/>.</summary>
        static void ExpectLines(List<Line> lines, int from, int to, long seq0)
        {
            Check.Equal(to - from, lines.Count, "lines received");
            for (int i = 0; i < lines.Count; i++)
            {
                Check.Equal(seq0 + i, lines[i].Seq, "the push number of line " + i);
                Check.Equal("line-" + (from + i), lines[i].Text, "line " + i);
            }
        }

        /// <summary>Waits until the gateway has confirmed every input sent to <paramref name="actor"/>.</summary>
        static void AllConfirmed(FerryClient client, string actor)
        {
            var watch = Stopwatch.StartNew();
            while (client.Unconfirmed(actor) > 0)
            {
                if (watch.ElapsedMilliseconds > 10000)
                    throw new Exception(client.Unconfirmed(actor) + " inputs to " + actor + " still unconfirmed after 10 s");
                Thread.Sleep(1);
            }
        }

        static void MalformedEndsTheSession()
        {
            const string welcome = "{\"type\":\"welcome\",\"session\":\"00000000000000ab\",\"node\":\"bad\",\"limits\":{\"max_frame\":65536,\"rate_per_second\":200,\"rate_burst\":400}}";
            const string push = "{\"type\":\"push\",\"actor\":\"alice\",\"seq\":0,\"message\":{\"from\":\"alice\",\"text\":\"hi\"}}";
            using (var gateway = new BadGateway(new[] { welcome, "{\"type\":\"bound\",\"actor\":\"alice\"}", push }, "{\"type\":\"push\",\"actor\":\"alice\",\"seq\":\"one\""))
            {
                FerryClient client = FerryClient.Connect(new ClientOptions { Urls = new[] { gateway.Url }, Token = "t" });
                Check.Equal("bad", Expect(client, FerryEventType.Connected).Session.Node, "the gateway");
                client.Bind("alice");
                Expect(client, FerryEventType.Bound);
                // The gateway answers this input with a push, then the malformed frame.
                client.Send("alice", "{\"Say\":\"hi\"}");
                Check.Equal(0L, Expect(client, FerryEventType.Push).Seq, "the push before the malformed frame");
                FerryEvent undelivered = Expect(client, FerryEventType.Undelivered);
                Check.Equal(1L, undelivered.Inputs, "inputs reported undelivered");
                FerryEvent closed = Expect(client, FerryEventType.Closed);
                Check.Equal(CloseCode.Malformed, closed.Code, "the close code");
                Check.True(closed.Reason.Contains("cannot read"), "a reason that says what went wrong: " + closed.Reason);
                Check.True(client.IsClosed, "the client is closed");
                Check.True(!client.Send("alice", "{\"Say\":\"more\"}"), "no input taken after the end");
                gateway.Wait(5000);
                Check.Equal(4000 + (int)CloseCode.Malformed, gateway.ClientCloseStatus, "the close status the gateway was sent");
                FerryEvent none;
                Check.True(!client.Poll(out none), "nothing after Closed");
            }
        }

        static void EveryMalformedVector(JsonValue vectors)
        {
            const string welcome = "{\"type\":\"welcome\",\"session\":\"00000000000000ab\",\"node\":\"bad\",\"limits\":{\"max_frame\":65536,\"rate_per_second\":200,\"rate_burst\":400}}";
            int checkedFrames = 0;
            foreach (JsonValue row in vectors.Member("server_frames").Items)
            {
                if (row.Member("malformed") == null) continue;
                string text = row.Member("text").String;
                using (var gateway = new BadGateway(new[] { welcome }, text))
                {
                    FerryClient client = FerryClient.Connect(new ClientOptions { Urls = new[] { gateway.Url }, Token = "t" });
                    Expect(client, FerryEventType.Connected);
                    FerryEvent closed = Expect(client, FerryEventType.Closed);
                    Check.Equal(CloseCode.Malformed, closed.Code, "the close code after " + text);
                    Check.True(closed.Reason.Contains("cannot read"), "a reason after " + text + ": " + closed.Reason);
                    gateway.Wait(5000);
                }
                checkedFrames++;
            }
            Check.True(checkedFrames >= 10, "the vectors' malformed frames were all played");
        }

        static void UndeliveredAfterACrash()
        {
            const string welcome = "{\"type\":\"welcome\",\"session\":\"00000000000000ab\",\"node\":\"gw\",\"limits\":{\"max_frame\":65536,\"rate_per_second\":200,\"rate_burst\":400}}";
            // Answers to hello, alice's bind and two more of her, carol's bind, alice's six inputs, then carol's four. Alice's first two ran, then
            // her node crashed with the next two on it, the gateway bound her again where she was rebuilt (and bob,
            // whom this client never bound), and the rebuilt alice ran the fifth; carol's node crashed with her
            // first three on it, none confirmed. Each answer comes after the inputs it counts were sent.
            var answers = new[]
            {
                welcome, "{\"type\":\"bound\",\"actor\":\"alice\"}", "{\"type\":\"bound\",\"actor\":\"alice\"}",
                "{\"type\":\"bound\",\"actor\":\"alice\"}", "{\"type\":\"bound\",\"actor\":\"carol\"}",
                null, "{\"type\":\"delivered\",\"actor\":\"alice\",\"inputs\":2}",
                "{\"type\":\"undelivered\",\"actor\":\"bob\",\"inputs\":3}",
                "{\"type\":\"undelivered\",\"actor\":\"alice\",\"inputs\":4}",
                "{\"type\":\"bound\",\"actor\":\"alice\"}",
                "{\"type\":\"push\",\"actor\":\"alice\",\"seq\":0,\"message\":\"rebuilt\"}",
                "{\"type\":\"bound\",\"actor\":\"bob\"}", null, "{\"type\":\"undelivered\",\"actor\":\"carol\",\"inputs\":3}",
                "{\"type\":\"delivered\",\"actor\":\"alice\",\"inputs\":5}",
            };
            // A malformed frame then ends the session, so that what neither frame settled is reported.
            using (var gateway = new BadGateway(answers, "{\"type\":\"push\",\"actor\":\"alice\",\"seq\":\"one\""))
            {
                FerryClient client = FerryClient.Connect(new ClientOptions { Urls = new[] { gateway.Url }, Token = "t" });
                Expect(client, FerryEventType.Connected);
                client.Bind("alice");
                Expect(client, FerryEventType.Bound);
                // Binds of an Actor bound already are answered, and are no rebind.
                client.Bind("alice");
                client.Bind("alice");
                Expect(client, FerryEventType.Bound);
                client.Bind("carol");
                Check.Equal("carol", Expect(client, FerryEventType.Bound).Actor, "the Actor bound");
                for (int i = 0; i < 6; i++) Check.True(client.Send("alice", "{\"Say\":\"line-" + i + "\"}"), "the input to alice was taken");
                for (int i = 0; i < 4; i++) Check.True(client.Send("carol", "{\"Say\":\"line-" + i + "\"}"), "the input to carol was taken");

                // Nothing for bob, to whom this client sent nothing.
                FerryEvent alice = Expect(client, FerryEventType.Undelivered);
                Check.Equal("alice", alice.Actor, "the Actor");
                Check.Equal(2L, alice.Inputs, "alice's inputs reported undelivered");
                Check.Equal("the node running it crashed", alice.Reason, "the reason");
                Check.Equal("alice", Expect(client, FerryEventType.Rebound).Actor, "the Actor bound again");
                Check.Equal(0L, Expect(client, FerryEventType.Push).Seq, "the rebuilt alice's push, on the same session");
                FerryEvent carol = Expect(client, FerryEventType.Undelivered);
                Check.Equal("carol", carol.Actor, "the Actor");
                Check.Equal(3L, carol.Inputs, "carol's inputs reported undelivered");

                // The end reports, in no set order, alice's sixth input (the later `delivered` counted on from the
                // crash) and carol's fourth: none of those reported before.
                var ended = new Dictionary<string, long>();
                for (int i = 0; i < 2; i++)
                {
                    FerryEvent undelivered = Expect(client, FerryEventType.Undelivered);
                    Check.True(undelivered.Reason.Contains("cannot read"), "the session's end as the reason: " + undelivered.Reason);
                    ended.Add(undelivered.Actor, undelivered.Inputs);
                }
                Check.Equal(1L, ended["alice"], "alice's inputs reported at the end");
                Check.Equal(1L, ended["carol"], "carol's inputs reported at the end");
                Check.Equal(CloseCode.Malformed, Expect(client, FerryEventType.Closed).Code, "the close code");
                gateway.Wait(5000);
            }
        }

        static void DrainMidPlay()
        {
            Cluster live = Live();
            live.ChatRoom("n2", "lobby", "alice");
            FerryClient client = Connect(live.WebSocket("n1"));
            SessionInfo first = Expect(client, FerryEventType.Connected).Session;
            Check.Equal("n1", first.Node, "the gateway");
            client.Bind("alice");
            Expect(client, FerryEventType.Bound);

            Task drain = null;
            List<Line> lines = Say(client, "alice", 0, 400, received =>
            {
                if (received == 50) drain = Task.Run(() => live.Drain("n2"));
            });
            Check.True(drain != null, "the drain started mid-play");
            Check.True(drain.Wait(60000), "the drain ended");
            Check.Equal(0L, live.Units("n2"), "units left on n2");

            ExpectLines(lines, 0, 400, 0);
            Check.Equal(first.Session, client.Session.Session, "the session");
            Check.Equal(1, client.Session.Connects, "sessions held");
            client.Close();
            Check.Equal(CloseCode.Normal, Expect(client, FerryEventType.Closed).Code, "the close code");
        }

        static void RefusedToken()
        {
            Cluster live = Live();
            var watch = Stopwatch.StartNew();
            FerryClient client = FerryClient.Connect(new ClientOptions
            {
                Urls = new[] { live.WebSocket("n3") },
                Token = "wrong",
                Attempts = 5,
                MinBackoffMs = 1000,
            });
            FerryEvent closed = Expect(client, FerryEventType.Closed);
            Check.Equal(CloseCode.Unauthenticated, closed.Code, "the close code");
            Check.True(closed.Reason.Contains("token"), "a reason about the token: " + closed.Reason);
            Check.True(watch.ElapsedMilliseconds < 1000, "no second attempt (" + watch.ElapsedMilliseconds + " ms)");
            Check.True(client.Session == null, "no session");
        }

        static void GatewayShutDown()
        {
            Cluster live = Live();
            live.ChatRoom("n3", "porch", "dave");
            FerryClient client = Connect(live.WebSocket("n5"), live.WebSocket("n3"));
            Check.Equal("n5", Expect(client, FerryEventType.Connected).Session.Node, "the gateway");
            client.Bind("dave");
            Expect(client, FerryEventType.Bound);
            ExpectLines(Say(client, "dave", 0, 10), 0, 10, 0);
            AllConfirmed(client, "dave");

            live.Terminate("n5");
            FerryEvent reconnected = Expect(client, FerryEventType.Reconnected);
            Check.True(reconnected.Reason.Contains("shutting down"), "the gateway's reason: " + reconnected.Reason);
            Check.Equal("n3", reconnected.Session.Node, "the new gateway");
            ExpectLines(Say(client, "dave", 10, 20), 10, 20, 0);
            client.Close();
            Expect(client, FerryEventType.Closed);
        }

        static void GatewayKilled()
        {
            Cluster live = Live();
            live.ChatRoom("n3", "den", "bob");
            FerryClient client = Connect(live.WebSocket("n4"), live.WebSocket("n3"));
            Check.Equal("n4", Expect(client, FerryEventType.Connected).Session.Node, "the gateway");
            client.Bind("bob");
            Expect(client, FerryEventType.Bound);
            ExpectLines(Say(client, "bob", 0, 30), 0, 30, 0);
            AllConfirmed(client, "bob");

            live.Kill("n4");
            // Every input was confirmed before the crash: none is reported.
            FerryEvent reconnected = Expect(client, FerryEventType.Reconnected);
            Check.Equal("n3", reconnected.Session.Node, "the new gateway");
            Check.Equal(2, reconnected.Session.Connects, "sessions held");

            // A new session: the pushes of its binding count from 0 again, and the room goes on.
            ExpectLines(Say(client, "bob", 30, 60), 30, 60, 0);
            client.Close();
            Expect(client, FerryEventType.Closed);
        }

        static void GatewayFrozen()
        {
            Cluster live = Live();
            live.ChatRoom("n3", "hall", "carol");
            FerryClient client = FerryClient.Connect(new ClientOptions
            {
                Urls = new[] { live.WebSocket("n1"), live.WebSocket("n3") },
                Token = Cluster.Token,
                MinBackoffMs = 20,
                IdleTimeoutMs = 1500,
            });
            Check.Equal("n1", Expect(client, FerryEventType.Connected).Session.Node, "the gateway");
            client.Bind("carol");
            Expect(client, FerryEventType.Bound);
            ExpectLines(Say(client, "carol", 0, 20), 0, 20, 0);
            AllConfirmed(client, "carol");

            live.Freeze("n1");
            var silent = Stopwatch.StartNew();
            for (int i = 20; i < 25; i++) client.Send("carol", "{\"Say\":\"line-" + i + "\"}");
            FerryEvent undelivered = Expect(client, FerryEventType.Undelivered);
            Check.Equal("carol", undelivered.Actor, "the Actor");
            Check.Equal(5L, undelivered.Inputs, "inputs reported undelivered");
            Check.True(silent.ElapsedMilliseconds >= 1500, "given up after the idle timeout, not before (" + silent.ElapsedMilliseconds + " ms)");
            FerryEvent reconnected = Expect(client, FerryEventType.Reconnected);
            Check.Equal("n3", reconnected.Session.Node, "the new gateway");

            // The five never reached the room: the next line it shows is the next one said.
            ExpectLines(Say(client, "carol", 25, 45), 25, 45, 0);
            client.Close();
            Expect(client, FerryEventType.Closed);
            live.Kill("n1");
        }
    }
}
