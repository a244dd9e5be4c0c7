// The Ferry game client for Unity and .NET: connects to a gateway over WebSocket, authenticates,
// binds Actors, sends them inputs and receives their pushes in order, and rides out a gateway that
// goes away by connecting to the next one and binding its Actors again. It follows
// docs/client-protocol.md, and has the TypeScript client's guarantees and shape.
//
// The connection runs on the thread pool; the game's thread only queues calls and takes events from
// Poll(), so nothing here blocks a frame and every event is handled on the game's own thread.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net.WebSockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Ferry.Client
{
    /// <summary>How a client connects.</summary>
    public sealed class ClientOptions
    {
        /// <summary>Gateway URLs (`wss://host:port/`); the first is tried first, the next ones on reconnects.</summary>
        public IList<string> Urls = new List<string>();
        /// <summary>The token the application's authenticator checks.</summary>
        public string Token = "";
        /// <summary>How long connecting and authenticating may take, per attempt.</summary>
        public int ConnectTimeoutMs = 5000;
        /// <summary>Whether to connect again after the gateway ended the session for the server's reasons.</summary>
        public bool Reconnect = true;
        /// <summary>The first wait after a failed attempt; it doubles each time.</summary>
        public int MinBackoffMs = 50;
        /// <summary>The longest wait between attempts.</summary>
        public int MaxBackoffMs = 5000;
        /// <summary>Attempts before giving up, each at the next gateway in the list.</summary>
        public int Attempts = 10;
        /// <summary>
        /// A gateway that owes an answer (a bind's, or the confirmation of inputs) and says nothing for this long is
        /// taken for dead and the client connects to the next one: a lost host closes no connection. Keep it above
        /// the longest a room's move may hold inputs; 0 turns it off.
        /// </summary>
        public int IdleTimeoutMs = 10000;
    }

    /// <summary>The session a client holds.</summary>
    public sealed class SessionInfo
    {
        /// <summary>The session's id on its gateway (16 hex digits).</summary>
        public string Session { get; internal set; }
        /// <summary>The gateway node's id.</summary>
        public string Node { get; internal set; }
        /// <summary>The gateway's URL.</summary>
        public string Url { get; internal set; }
        /// <summary>How many sessions this client has held so far (1 until it reconnects).</summary>
        public int Connects { get; internal set; }
        /// <summary>The limits the session is held to.</summary>
        public Limits Limits { get; internal set; }
    }

    /// <summary>What a <see cref="FerryEvent"/> says.</summary>
    public enum FerryEventType
    {
        /// <summary>The first session is open: <see cref="FerryEvent.Session"/>.</summary>
        Connected,
        /// <summary>A <see cref="FerryClient.Bind"/> was answered: the Actor is bound, its pushes count from 0.</summary>
        Bound,
        /// <summary>A <see cref="FerryClient.Bind"/> was refused, with the reason; the session stays open.</summary>
        BindRefused,
        /// <summary>A bound Actor pushed <see cref="FerryEvent.Message"/>, numbered <see cref="FerryEvent.Seq"/> from 0 since it was bound.</summary>
        Push,
        /// <summary>An Actor is no longer bound to this client, for <see cref="FerryEvent.Reason"/>.</summary>
        Unbound,
        /// <summary>
        /// <see cref="FerryEvent.Inputs"/> inputs to the Actor may not have reached it, and are not sent again: they
        /// were not confirmed when the session ended or the Actor was unbound (this comes just before the
        /// Reconnected, Unbound or Closed that follows), or the node running the Actor crashed (the session stays
        /// open).
        /// </summary>
        Undelivered,
        /// <summary>
        /// The node running the Actor crashed, and the gateway bound it again, in this same session, where it runs now:
        /// what it had pushed that had not arrived is lost, and its pushes count from 0 again. An Undelivered before
        /// this names the inputs the crash left in doubt.
        /// </summary>
        Rebound,
        /// <summary>The session ended for the server's reasons; the client is connected again and its Actors bound.</summary>
        Reconnected,
        /// <summary>The client ended and will not reconnect: <see cref="FerryEvent.Code"/> and <see cref="FerryEvent.Reason"/> say why.</summary>
        Closed,
    }

    /// <summary>Something the gateway told the client; which fields are set depends on <see cref="Type"/>.</summary>
    public sealed class FerryEvent
    {
        public FerryEventType Type { get; internal set; }
        public string Actor { get; internal set; }
        /// <summary>A push's number: 0 for the first push after each bind, then one more each push.</summary>
        public long Seq { get; internal set; }
        /// <summary>A push's message as JSON text (serde's JSON form of what the Actor pushed).</summary>
        public string Message { get; internal set; }
        /// <summary>How many inputs were undelivered.</summary>
        public long Inputs { get; internal set; }
        public string Reason { get; internal set; }
        /// <summary>Why a Closed client ended; null when its connection was lost without a word.</summary>
        public CloseCode? Code { get; internal set; }
        /// <summary>The session of a Connected or Reconnected.</summary>
        public SessionInfo Session { get; internal set; }

        public override string ToString()
        {
            var sb = new StringBuilder(Type.ToString());
            if (Actor != null) sb.Append(" actor=").Append(Actor);
            if (Type == FerryEventType.Push) sb.Append(" seq=").Append(Seq).Append(" message=").Append(Message);
            if (Type == FerryEventType.Undelivered) sb.Append(" inputs=").Append(Inputs);
            if (Code != null) sb.Append(" code=").Append(CloseCodes.Name(Code.Value));
            if (Session != null) sb.Append(" node=").Append(Session.Node);
            if (Reason != null) sb.Append(" reason=").Append(Reason);
            return sb.ToString();
        }
    }

    /// <summary>
    /// A game client. <see cref="Connect"/> returns at once and connects in the background; calls are queued
    /// and events wait for <see cref="Poll"/>, which the game calls from its own thread (each frame, in Unity).
    /// </summary>
    public sealed class FerryClient : IDisposable
    {
        /// <summary>How a connection ended.</summary>
        sealed class End
        {
            public CloseCode? Code;
            public string Reason;
            /// <summary>Whether to connect again: the server's reasons, or a connection lost without a word.</summary>
            public bool Retryable;
        }

        /// <summary>
        /// Inputs written to the current session for one Actor, and how many of them the gateway settled: confirmed, or
        /// reported undelivered.
        /// </summary>
        sealed class Counts
        {
            public long Sent;
            public long Delivered;
        }

        /// <summary>A connection that failed before its welcome.</summary>
        sealed class AttemptFailed : Exception
        {
            public readonly CloseCode? Code;

            public AttemptFailed(CloseCode? code, string reason) : base(reason)
            {
                Code = code;
            }
        }

        /// <summary>One open WebSocket to a gateway, after its welcome. Frames go out in order from one writer.</summary>
        sealed class Link
        {
            public readonly ClientWebSocket Socket;
            public readonly string Url;
            public readonly ServerFrame Welcome;
            /// <summary>The gateway's `closing` frame: its code wins over the close frame's.</summary>
            public End Closing;
            /// <summary>Set when the client gave up on a silent gateway.</summary>
            public End Idle;
            public long LastHeard;
            public long OwedSince;
            readonly Queue<string> outbox = new Queue<string>();
            readonly SemaphoreSlim queued = new SemaphoreSlim(0);
            readonly CancellationTokenSource done = new CancellationTokenSource();
            bool stopped;

            public Link(ClientWebSocket socket, string url, ServerFrame welcome)
            {
                Socket = socket;
                Url = url;
                Welcome = welcome;
            }

            public CancellationToken Done { get { return done.Token; } }

            public void Send(string text)
            {
                lock (outbox) outbox.Enqueue(text);
                queued.Release();
            }

            public async Task WriteLoop()
            {
                try
                {
                    while (true)
                    {
                        await queued.WaitAsync(done.Token).ConfigureAwait(false);
                        string text;
                        lock (outbox) text = outbox.Dequeue();
                        await Socket.SendAsync(new ArraySegment<byte>(Encoding.UTF8.GetBytes(text)),
                            WebSocketMessageType.Text, true, done.Token).ConfigureAwait(false);
                    }
                }
                catch (Exception)
                {
                    // A write that failed ends the connection; the reader hears of it and reports the end.
                    Socket.Abort();
                }
            }

            /// <summary>Ends the connection; later calls do nothing.</summary>
            public void Stop()
            {
                lock (outbox)
                {
                    if (stopped) return;
                    stopped = true;
                }
                done.Cancel();
                Socket.Abort();
                Socket.Dispose();
            }
        }

        /// <summary>What a message read from a WebSocket was.</summary>
        struct Message
        {
            public WebSocketMessageType Type;
            public string Text;
            public int Status;
            public string Description;
        }

        readonly ClientOptions options;
        readonly object gate = new object();
        readonly Queue<FerryEvent> events = new Queue<FerryEvent>();
        /// <summary>Actors the application bound: bound again on every new session.</summary>
        readonly HashSet<string> wanted = new HashSet<string>();
        /// <summary>Binds the application made that wait for their answer.</summary>
        readonly HashSet<string> binding = new HashSet<string>();
        /// <summary>Binds sent on a new session that wait for their answer before Reconnected is told.</summary>
        readonly HashSet<string> rebinding = new HashSet<string>();
        /// <summary>
        /// Bind frames sent on the current session that no bound or bind_refused answered yet, per Actor: a bound beyond
        /// them is the gateway's own rebind after a crash.
        /// </summary>
        readonly Dictionary<string, int> asked = new Dictionary<string, int>();
        /// <summary>Inputs sent while no session was open, in order.</summary>
        readonly List<KeyValuePair<string, string>> pending = new List<KeyValuePair<string, string>>();
        readonly Dictionary<string, Counts> inputs = new Dictionary<string, Counts>();
        readonly CancellationTokenSource stopping = new CancellationTokenSource();
        readonly Stopwatch clock = Stopwatch.StartNew();
        Link link;
        SessionInfo session;
        /// <summary>Why the last session ended, while the Reconnected that follows it is owed.</summary>
        string reconnectReason;
        bool closeAsked;
        bool finished;

        FerryClient(ClientOptions options)
        {
            this.options = options;
        }

        /// <summary>Starts connecting to the first gateway that takes the token, trying each in turn; returns at once.</summary>
        public static FerryClient Connect(ClientOptions options)
        {
            if (options == null || options.Urls == null || options.Urls.Count == 0)
                throw new ArgumentException("no gateway URL given; list at least one in ClientOptions.Urls");
            if (options.Token == null) throw new ArgumentException("no token given; set ClientOptions.Token");
            var client = new FerryClient(options);
            // Run handles every failure it expects; anything else still ends the client with a Closed event.
            Task.Run(() => client.Run()).ContinueWith(
                run => client.Finish(null, "the client failed: " + run.Exception.GetBaseException().Message),
                TaskContinuationOptions.OnlyOnFaulted);
            return client;
        }

        /// <summary>The session held now; null before the first welcome.</summary>
        public SessionInfo Session
        {
            get { lock (gate) return session; }
        }

        /// <summary>Whether the client has ended (its Closed event is queued).</summary>
        public bool IsClosed
        {
            get { lock (gate) return finished; }
        }

        /// <summary>Takes the next event, if any: call it until it returns false, from the game's thread.</summary>
        public bool Poll(out FerryEvent next)
        {
            lock (gate)
            {
                next = events.Count > 0 ? events.Dequeue() : null;
                return next != null;
            }
        }

        /// <summary>
        /// Binds an Actor to this client: its pushes come here, and <see cref="Send"/> reaches it. Answered by a
        /// Bound or BindRefused event; false once the client is closed.
        /// </summary>
        public bool Bind(string actor)
        {
            lock (gate)
            {
                if (finished || closeAsked) return false;
                wanted.Add(actor);
                binding.Add(actor);
                if (link != null) SendBind(link, actor);
                return true;
            }
        }

        /// <summary>Stops being bound to an Actor; an Unbound event answers. The inputs sent before go on to it.</summary>
        public void Unbind(string actor)
        {
            lock (gate)
            {
                if (!wanted.Remove(actor)) return;
                binding.Remove(actor);
                pending.RemoveAll(input => input.Key == actor);
                if (link != null && !finished) link.Send(Protocol.Unbind(actor));
            }
        }

        /// <summary>
        /// Sends a message, as JSON text (serde's JSON form of the Actor's message type), to a bound Actor; while the
        /// client reconnects it is queued and sent once the Actor is bound again. False when the Actor is not bound
        /// (an Unbound or BindRefused event says why) or the client is closed. Text that is not JSON is the caller's
        /// mistake and throws ArgumentException.
        /// </summary>
        public bool Send(string actor, string message)
        {
            try
            {
                Json.Parse(message);
            }
            catch (FormatException e)
            {
                throw new ArgumentException("the message for " + actor + " is not JSON: " + e.Message, "message");
            }
            lock (gate)
            {
                if (finished || closeAsked || !wanted.Contains(actor)) return false;
                if (link == null) pending.Add(new KeyValuePair<string, string>(actor, message));
                else Write(actor, message);
                return true;
            }
        }

        /// <summary>
        /// How many inputs to the Actor this session has sent that the gateway has not yet confirmed as run (nor reported
        /// undelivered).
        /// </summary>
        public long Unconfirmed(string actor)
        {
            lock (gate)
            {
                Counts counts;
                return inputs.TryGetValue(actor, out counts) ? counts.Sent - counts.Delivered : 0;
            }
        }

        /// <summary>
        /// Says bye and ends the session: the inputs sent before go on to their Actors, no reconnect follows, and a
        /// Closed event (normal) ends the events.
        /// </summary>
        public void Close()
        {
            lock (gate)
            {
                if (finished || closeAsked) return;
                closeAsked = true;
                if (link != null) SayBye(link);
                else stopping.Cancel();
            }
        }

        /// <summary>Closes the client.</summary>
        public void Dispose()
        {
            Close();
        }

        /// <summary>Connects, serves each session, and connects again after a retryable end, until the end.</summary>
        async Task Run()
        {
            int start = 0;
            int connects = 0;
            string lastReason = null;
            while (true)
            {
                Link next;
                try
                {
                    next = await Open(start).ConfigureAwait(false);
                }
                catch (AttemptFailed failed)
                {
                    Finish(failed.Code, failed.Message);
                    return;
                }
                catch (OperationCanceledException)
                {
                    Finish(CloseCode.Normal, "the client closed");
                    return;
                }
                connects++;
                Adopt(next, connects, lastReason);
                End end = await Serve(next).ConfigureAwait(false);
                lock (gate)
                {
                    link = null;
                    if (closeAsked)
                    {
                        // The application left: what it sent before its bye goes on, unreported.
                        Finish(CloseCode.Normal, "the client closed");
                        return;
                    }
                    Undelivered(null, end.Reason);
                    if (!end.Retryable || !options.Reconnect)
                    {
                        Finish(end.Code, end.Reason);
                        return;
                    }
                }
                lastReason = end.Reason;
                start = options.Urls.IndexOf(next.Url) + 1;
            }
        }

        /// <summary>Connects from gateway <paramref name="start"/> on, with backoff, until one takes the token.</summary>
        async Task<Link> Open(int start)
        {
            var urls = options.Urls;
            int tries = options.Reconnect ? Math.Max(1, options.Attempts) : urls.Count;
            int backoff = options.MinBackoffMs;
            string last = "";
            for (int n = 0; n < tries; n++)
            {
                string url = urls[(start + n) % urls.Count];
                try
                {
                    return await Attempt(url).ConfigureAwait(false);
                }
                catch (AttemptFailed failed)
                {
                    if (failed.Code != null && !CloseCodes.IsRetryable(failed.Code.Value)) throw;
                    last = failed.Message;
                }
                if (n + 1 < tries && options.Reconnect)
                {
                    await Task.Delay(backoff, stopping.Token).ConfigureAwait(false);
                    backoff = Math.Min(backoff * 2, options.MaxBackoffMs);
                }
            }
            throw new AttemptFailed(null, "no gateway could be reached after " + tries + " attempts (last: " + last +
                "); check the URLs and that the nodes accept WebSocket clients");
        }

        /// <summary>Opens a WebSocket to <paramref name="url"/>, says hello and waits for the welcome.</summary>
        async Task<Link> Attempt(string url)
        {
            var socket = new ClientWebSocket();
            using (var timeout = CancellationTokenSource.CreateLinkedTokenSource(stopping.Token))
            {
                timeout.CancelAfter(options.ConnectTimeoutMs);
                End closing = null;
                try
                {
                    await socket.ConnectAsync(new Uri(url), timeout.Token).ConfigureAwait(false);
                    await socket.SendAsync(new ArraySegment<byte>(Encoding.UTF8.GetBytes(Protocol.Hello(options.Token))),
                        WebSocketMessageType.Text, true, timeout.Token).ConfigureAwait(false);
                    while (true)
                    {
                        Message message = await Receive(socket, timeout.Token).ConfigureAwait(false);
                        if (message.Type == WebSocketMessageType.Close)
                        {
                            End end = closing ?? FromClose(message, url);
                            throw new AttemptFailed(end.Code, end.Reason);
                        }
                        ServerFrame frame;
                        string error;
                        if (!TryFrame(message, out frame, out error))
                        {
                            await Refuse(socket, error).ConfigureAwait(false);
                            throw new AttemptFailed(CloseCode.Malformed, error);
                        }
                        if (frame.Type == "welcome") return new Link(socket, url, frame);
                        if (frame.Type == "closing") closing = FromClosing(frame);
                    }
                }
                catch (AttemptFailed)
                {
                    socket.Dispose();
                    throw;
                }
                catch (Exception e)
                {
                    socket.Abort();
                    socket.Dispose();
                    if (stopping.IsCancellationRequested) throw new OperationCanceledException();
                    if (closing != null) throw new AttemptFailed(closing.Code, closing.Reason);
                    if (timeout.IsCancellationRequested)
                        throw new AttemptFailed(null, "no welcome from " + url + " within " + options.ConnectTimeoutMs + " ms");
                    throw new AttemptFailed(null, "cannot reach " + url + ": " + e.Message);
                }
            }
        }

        /// <summary>Takes the new session: binds every wanted Actor again, then sends what was queued meanwhile.</summary>
        void Adopt(Link next, int connects, string lastReason)
        {
            lock (gate)
            {
                link = next;
                link.LastHeard = clock.ElapsedMilliseconds;
                session = new SessionInfo
                {
                    Session = next.Welcome.Session,
                    Node = next.Welcome.Node,
                    Url = next.Url,
                    Connects = connects,
                    Limits = next.Welcome.Limits,
                };
                // Binds go out before anything queued: the gateway holds inputs until their Actor is bound.
                rebinding.Clear();
                asked.Clear();
                foreach (string actor in wanted)
                {
                    rebinding.Add(actor);
                    SendBind(next, actor);
                }
                foreach (var input in pending) Write(input.Key, input.Value);
                pending.Clear();
                if (connects == 1) Emit(new FerryEvent { Type = FerryEventType.Connected, Session = session });
                else
                {
                    reconnectReason = lastReason;
                    MaybeReconnected();
                }
                if (closeAsked) SayBye(next);
            }
        }

        /// <summary>Reads the session's frames until its connection ends, and says how it ended.</summary>
        async Task<End> Serve(Link current)
        {
            Task writer = Task.Run(() => current.WriteLoop());
            Task watchdog = options.IdleTimeoutMs > 0 ? Task.Run(() => Watch(current)) : Task.FromResult(0);
            try
            {
                while (true)
                {
                    Message message = await Receive(current.Socket, CancellationToken.None).ConfigureAwait(false);
                    if (message.Type == WebSocketMessageType.Close) return current.Closing ?? FromClose(message, current.Url);
                    ServerFrame frame;
                    string error;
                    if (!TryFrame(message, out frame, out error))
                    {
                        await Refuse(current.Socket, error).ConfigureAwait(false);
                        return new End { Code = CloseCode.Malformed, Reason = error };
                    }
                    lock (gate)
                    {
                        current.LastHeard = clock.ElapsedMilliseconds;
                        OnFrame(current, frame);
                    }
                }
            }
            catch (Exception e)
            {
                return current.Idle ?? current.Closing ??
                    new End { Reason = "the connection to " + current.Url + " was lost: " + e.Message, Retryable = true };
            }
            finally
            {
                current.Stop();
                await Task.WhenAll(writer, watchdog).ConfigureAwait(false);
            }
        }

        /// <summary>Gives up on a gateway that owes an answer and has been silent for the idle timeout.</summary>
        async Task Watch(Link current)
        {
            int tick = Math.Max(10, options.IdleTimeoutMs / 4);
            try
            {
                while (true)
                {
                    await Task.Delay(tick, current.Done).ConfigureAwait(false);
                    lock (gate)
                    {
                        long now = clock.ElapsedMilliseconds;
                        if (!Owed())
                        {
                            current.OwedSince = 0;
                            continue;
                        }
                        if (current.OwedSince == 0) current.OwedSince = now;
                        if (now - Math.Max(current.LastHeard, current.OwedSince) < options.IdleTimeoutMs) continue;
                        current.Idle = new End
                        {
                            Reason = "nothing heard from " + current.Url + " for " + options.IdleTimeoutMs + " ms",
                            Retryable = true,
                        };
                        current.Socket.Abort();
                        return;
                    }
                }
            }
            catch (OperationCanceledException)
            {
                // The connection ended first.
            }
        }

        void SendBind(Link to, string actor)
        {
            int sent;
            asked.TryGetValue(actor, out sent);
            asked[actor] = sent + 1;
            to.Send(Protocol.Bind(actor));
        }

        /// <summary>Takes an answer to a bind of the Actor this session sent; false if none waited for one.</summary>
        bool Answered(string actor)
        {
            int sent;
            if (!asked.TryGetValue(actor, out sent)) return false;
            if (sent == 1) asked.Remove(actor);
            else asked[actor] = sent - 1;
            return true;
        }

        /// <summary>Whether the gateway owes this client an answer: a bind's, or a confirmation of inputs.</summary>
        bool Owed()
        {
            if (binding.Count > 0 || rebinding.Count > 0) return true;
            foreach (var counts in inputs.Values)
                if (counts.Sent > counts.Delivered) return true;
            return false;
        }

        void OnFrame(Link current, ServerFrame frame)
        {
            switch (frame.Type)
            {
                case "push":
                    Emit(new FerryEvent { Type = FerryEventType.Push, Actor = frame.Actor, Seq = frame.Seq, Message = frame.Message });
                    break;
                case "bound":
                    bool answer = Answered(frame.Actor);
                    bool resumed = rebinding.Remove(frame.Actor);
                    if (binding.Remove(frame.Actor)) Emit(new FerryEvent { Type = FerryEventType.Bound, Actor = frame.Actor });
                    else if (!answer && wanted.Contains(frame.Actor)) Emit(new FerryEvent { Type = FerryEventType.Rebound, Actor = frame.Actor });
                    if (resumed) MaybeReconnected();
                    break;
                case "delivered":
                    Counts counts;
                    if (inputs.TryGetValue(frame.Actor, out counts)) counts.Delivered = Math.Max(counts.Delivered, frame.Inputs);
                    break;
                case "undelivered":
                    // The node running the Actor crashed: of the first Inputs sent, those no `delivered` covered may not
                    // have run, and no later one covers them.
                    Counts settling;
                    if (!inputs.TryGetValue(frame.Actor, out settling)) break;
                    long settled = Math.Min(frame.Inputs, settling.Sent);
                    long unconfirmed = settled - settling.Delivered;
                    settling.Delivered = Math.Max(settling.Delivered, settled);
                    if (unconfirmed > 0)
                        Emit(new FerryEvent { Type = FerryEventType.Undelivered, Actor = frame.Actor, Inputs = unconfirmed, Reason = "the node running it crashed" });
                    break;
                case "bind_refused":
                    Answered(frame.Actor);
                    wanted.Remove(frame.Actor);
                    pending.RemoveAll(input => input.Key == frame.Actor);
                    Undelivered(frame.Actor, frame.Reason);
                    // A bind made again after a reconnect is reported as the Actor's unbinding.
                    var type = binding.Remove(frame.Actor) ? FerryEventType.BindRefused : FerryEventType.Unbound;
                    Emit(new FerryEvent { Type = type, Actor = frame.Actor, Reason = frame.Reason });
                    if (rebinding.Remove(frame.Actor)) MaybeReconnected();
                    break;
                case "unbound":
                    if (wanted.Remove(frame.Actor)) Undelivered(frame.Actor, frame.Reason);
                    else inputs.Remove(frame.Actor); // the application unbound it: what it sent goes on to the Actor
                    binding.Remove(frame.Actor);
                    Emit(new FerryEvent { Type = FerryEventType.Unbound, Actor = frame.Actor, Reason = frame.Reason });
                    if (rebinding.Remove(frame.Actor)) MaybeReconnected();
                    break;
                case "closing":
                    current.Closing = FromClosing(frame);
                    break;
            }
        }

        /// <summary>Tells the application of a reconnect once every Actor it had bound has been bound again (or refused).</summary>
        void MaybeReconnected()
        {
            if (reconnectReason == null || rebinding.Count > 0) return;
            Emit(new FerryEvent { Type = FerryEventType.Reconnected, Reason = reconnectReason, Session = session });
            reconnectReason = null;
        }

        /// <summary>Writes an input to the current session and counts it until the gateway confirms it.</summary>
        void Write(string actor, string message)
        {
            Counts counts;
            if (!inputs.TryGetValue(actor, out counts)) inputs[actor] = counts = new Counts();
            counts.Sent++;
            link.Send(Protocol.Input(actor, message));
        }

        /// <summary>Reports the inputs to <paramref name="actor"/> (every Actor when null) the gateway had not confirmed.</summary>
        void Undelivered(string actor, string reason)
        {
            var actors = actor == null ? new List<string>(inputs.Keys) : new List<string> { actor };
            foreach (string a in actors)
            {
                Counts counts;
                if (!inputs.TryGetValue(a, out counts)) continue;
                inputs.Remove(a);
                if (counts.Sent > counts.Delivered)
                    Emit(new FerryEvent { Type = FerryEventType.Undelivered, Actor = a, Inputs = counts.Sent - counts.Delivered, Reason = reason });
            }
        }

        /// <summary>Sends bye; a gateway that does not close within a second is left.</summary>
        void SayBye(Link current)
        {
            current.Send(Protocol.Bye);
            Task.Delay(1000).ContinueWith(_ => current.Stop());
        }

        void Finish(CloseCode? code, string reason)
        {
            lock (gate)
            {
                if (finished) return;
                finished = true;
                link = null;
                pending.Clear();
                Emit(new FerryEvent { Type = FerryEventType.Closed, Code = code, Reason = reason });
            }
        }

        void Emit(FerryEvent next)
        {
            events.Enqueue(next);
        }

        static End FromClosing(ServerFrame frame)
        {
            return new End { Code = frame.Code, Reason = frame.Reason, Retryable = frame.Retryable };
        }

        static End FromClose(Message message, string url)
        {
            CloseCode? code = CloseCodes.FromStatus(message.Status);
            return new End
            {
                Code = code,
                Reason = string.IsNullOrEmpty(message.Description)
                    ? "the connection to " + url + " closed (" + message.Status + ")"
                    : message.Description,
                Retryable = Protocol.RetryableClose(code),
            };
        }

        /// <summary>Reads a message as a gateway frame; a binary message is not one.</summary>
        static bool TryFrame(Message message, out ServerFrame frame, out string error)
        {
            if (message.Type == WebSocketMessageType.Text) return Protocol.TryRead(message.Text, out frame, out error);
            frame = null;
            error = "the gateway sent a binary message, not a JSON frame; update the client";
            return false;
        }

        /// <summary>Closes a connection whose gateway sent what this client cannot read, saying why, within a second.</summary>
        static async Task Refuse(ClientWebSocket socket, string reason)
        {
            // A close reason is at most 123 bytes of UTF-8.
            string said = reason;
            while (Encoding.UTF8.GetByteCount(said) > 123) said = said.Substring(0, said.Length - 1);
            try
            {
                using (var timeout = new CancellationTokenSource(1000))
                {
                    await socket.CloseOutputAsync((WebSocketCloseStatus)(CloseCodes.WebSocketBase + (int)CloseCode.Malformed),
                        said, timeout.Token).ConfigureAwait(false);
                }
            }
            catch (Exception)
            {
                // The connection is being left either way.
            }
            socket.Abort();
        }

        /// <summary>Reads one whole message.</summary>
        static async Task<Message> Receive(ClientWebSocket socket, CancellationToken cancel)
        {
            var buffer = new ArraySegment<byte>(new byte[8192]);
            using (var whole = new MemoryStream())
            {
                while (true)
                {
                    WebSocketReceiveResult result = await socket.ReceiveAsync(buffer, cancel).ConfigureAwait(false);
                    if (result.MessageType == WebSocketMessageType.Close)
                    {
                        return new Message
                        {
                            Type = WebSocketMessageType.Close,
                            Status = (int)(result.CloseStatus ?? WebSocketCloseStatus.Empty),
                            Description = result.CloseStatusDescription,
                        };
                    }
                    whole.Write(buffer.Array, 0, result.Count);
                    if (result.EndOfMessage)
                    {
                        return new Message
                        {
                            Type = result.MessageType,
                            Text = result.MessageType == WebSocketMessageType.Text ? Encoding.UTF8.GetString(whole.ToArray()) : null,
                        };
                    }
                }
            }
        }
    }
}
